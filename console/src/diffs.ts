// Differences drawn for a person, with jsdiff: a text beside an earlier one, what was added in
// <ins> and what was removed in <del> (the page's style marks them + and −), every piece a text
// node. Lines for records (the merge's view and a record's history), words for a memory's text.

import { diffArrays, diffWordsWithSpace } from "diff";
import { el } from "./dom.js";
import { splitLines } from "./merge.js";

/** ``text`` beside ``base`` line by line (null base: everything added; null text: deleted). */
export function linesMarked(base: string | null, text: string | null, id: string, label: string): HTMLElement {
  const box = el("pre", { ...(id ? { id } : {}), class: "diff", "aria-label": label, tabindex: "0" });
  if (text === null) {
    box.append(el("em", {}, "(deleted)"));
    return box;
  }
  for (const part of diffArrays(base === null ? [] : splitLines(base), splitLines(text))) {
    for (const line of part.value) {
      const tag = part.added ? "ins" : part.removed ? "del" : "span";
      box.append(el(tag, { class: "line" }, line));
    }
  }
  return box;
}

/** ``text`` beside ``base`` word by word, in one paragraph. */
export function wordsMarked(base: string, text: string, label: string): HTMLElement {
  const box = el("p", { class: "words", "aria-label": label });
  for (const part of diffWordsWithSpace(base, text)) {
    box.append(part.added ? el("ins", {}, part.value) : part.removed ? el("del", {}, part.value) : part.value);
  }
  return box;
}
