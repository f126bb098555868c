// The records view: the Global and workspace records, edited under the explicit revision contract
// of Browser editing (EditRecords with expected_generation). A save that meets a newer generation
// writes nothing; the page then shows the version the edit started from (the base), theirs and
// mine, and merges them so that neither side's change is lost without a person choosing it.
//
// The base is read from the record's revisions by the generation the edit started from, so it
// survives a reload. This tab also keeps it in sessionStorage with the unsaved text: that copy is
// used only when the revision is gone (retention keeps a record's newest 100, a delete erases the
// ones before it).

import { ApiError, type Json, get, post, requestId, tenantPath } from "./api.js";
import { linesMarked } from "./diffs.js";
import { button, el, errorBox, replace, sendButton } from "./dom.js";
import { historyHref } from "./history.js";
import { type Block, type Choice, merge3, mergedText } from "./merge.js";

/** An edit in progress: the record's content at ``generation`` (null when the record did not
 * exist then), and the text the person is writing (null: delete the record). */
interface Edit {
  generation: string;
  base: string | null;
  mine: string | null;
}

interface Place {
  tenant: string;
  scope: string;
  key: string;
  target: HTMLElement;
}

const DRAFT_PREFIX = "mnemosyne-console-draft";

function draftKey(p: Place): string {
  return JSON.stringify([DRAFT_PREFIX, p.tenant, p.scope, p.key]);
}

/** Every draft this tab keeps, of any tenant, dropped: a signed-out tab holds no record's text. */
export function forgetDrafts(): void {
  const prefix = JSON.stringify([DRAFT_PREFIX]).slice(0, -1);
  for (const key of Object.keys(sessionStorage)) if (key.startsWith(`${prefix},`)) sessionStorage.removeItem(key);
}

function keepDraft(p: Place, edit: Edit): void {
  sessionStorage.setItem(draftKey(p), JSON.stringify(edit));
}

function storedDraft(p: Place): Edit | null {
  try {
    const raw = JSON.parse(sessionStorage.getItem(draftKey(p)) ?? "null");
    if (raw && typeof raw.generation === "string" && "base" in raw && "mine" in raw) return raw as Edit;
  } catch {
    // a draft this page cannot read is no draft
  }
  return null;
}

export async function recordsView(tenant: string, main: HTMLElement): Promise<void> {
  const scopes = el("div", { id: "scopes" });
  const editor = el("section", { id: "editor", "aria-label": "Records of the scope" });
  const other = el("input", { id: "open-scope", placeholder: "workspace/name", "aria-label": "Workspace scope" }) as HTMLInputElement;
  const otherForm = el("form", { class: "row" }, other, el("button", { type: "submit" }, "Open scope"));
  otherForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = other.value.trim();
    if (name) void openScope(tenant, name.startsWith("workspace/") || name === "global" ? name : `workspace/${name}`, editor);
  });
  replace(main, el("h1", {}, "Records"), scopes, otherForm, editor);
  try {
    const answer = await get(tenantPath(tenant, "/scopes"));
    const list = (answer.scopes ?? []) as Record<string, any>[];
    replace(
      scopes,
      el(
        "div",
        { class: "row" },
        ...list.map((s) =>
          button(`${s.scope} (${s.records ?? 0})`, () => void openScope(tenant, s.scope, editor), {
            "data-scope": s.scope,
            "aria-label": `Open ${s.scope}`,
          }),
        ),
      ),
    );
    (scopes.querySelector("button") as HTMLElement | null)?.focus();
  } catch (error) {
    replace(scopes, errorBox(error));
  }
}

async function openScope(tenant: string, scope: string, target: HTMLElement): Promise<void> {
  try {
    const records: Record<string, any>[] = [];
    let generation = "0";
    let pageToken = "";
    do {
      const answer = await get(tenantPath(tenant, "/records"), { scope, page_token: pageToken });
      records.push(...(answer.records ?? []));
      generation = String(answer.generation ?? "0");
      pageToken = answer.nextPageToken ?? "";
    } while (pageToken);
    const key = el("input", { id: "new-record-key", placeholder: "notes.md", "aria-label": "New record key" }) as HTMLInputElement;
    const newForm = el("form", { class: "row" }, key, el("button", { type: "submit" }, "New record"));
    newForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const name = key.value.trim();
      if (name) open({ tenant, scope, key: name, target }, { generation, base: null, mine: "" });
    });
    replace(
      target,
      el("h2", { tabindex: "-1", id: "scope-heading" }, `${scope} — generation ${generation}`),
      records.length ? null : el("p", {}, "No records in this scope yet."),
      el(
        "ul",
        {},
        ...records.map((r) =>
          el(
            "li",
            {},
            button(`Edit ${r.key}`, () => open({ tenant, scope, key: r.key, target }, { generation, base: r.content ?? "", mine: r.content ?? "" }), {
              "data-key": r.key,
            }),
          ),
        ),
      ),
      newForm,
    );
    (target.querySelector("#scope-heading") as HTMLElement).focus();
  } catch (error) {
    replace(target, errorBox(error));
  }
}

/** Open the editor on ``fresh`` (what the scope holds now), unless this tab keeps an unsaved
 * draft of the record: then the draft comes back with the base it started from. */
function open(p: Place, fresh: Edit): void {
  const kept = storedDraft(p);
  if (kept && kept.mine !== kept.base) editor(p, kept, true);
  else editor(p, fresh, false);
}

async function save(p: Place, expected: string, mine: string | null): Promise<string> {
  const answer = await post(tenantPath(p.tenant, "/records:edit"), {
    scope: p.scope,
    expectedGeneration: expected,
    changes: [mine === null ? { op: "DELETE", key: p.key } : { op: "PUT", key: p.key, content: mine }],
    requestId: requestId(),
  });
  return String(answer.generation);
}

/** After a save: the editor at the new generation (or the scope, after a delete), and a notice. */
async function saved(p: Place, mine: string | null, generation: string): Promise<void> {
  if (mine === null) {
    sessionStorage.removeItem(draftKey(p));
    await openScope(p.tenant, p.scope, p.target);
    p.target.prepend(el("p", { class: "notice", role: "status", id: "deleted" }, `Deleted ${p.key}: ${p.scope} is at generation ${generation}.`));
    return;
  }
  editor(p, { generation, base: mine, mine }, false);
  replace(
    p.target.querySelector("#save-outcome") as HTMLElement,
    el("p", { class: "notice", role: "status", id: "saved" }, `Saved: ${p.scope} is at generation ${generation}.`),
  );
}

/** Save ``mine`` against ``edit.generation``; a newer generation opens the three-way view. */
async function attempt(p: Place, edit: Edit, outcome: HTMLElement, expected = edit.generation, notice = ""): Promise<void> {
  try {
    await saved(p, edit.mine, await save(p, expected, edit.mine));
  } catch (error) {
    if (error instanceof ApiError && error.reason === "GENERATION_MISMATCH") await conflict(p, edit, notice);
    else replace(outcome, errorBox(error));
  }
}

function editor(p: Place, edit: Edit, restored: boolean): void {
  keepDraft(p, edit);
  const text = el("textarea", { id: "record-content", "aria-label": `Content of ${p.key}`, spellcheck: "false" }) as HTMLTextAreaElement;
  text.value = edit.mine ?? "";
  text.addEventListener("input", () => keepDraft(p, { ...edit, mine: text.value }));
  const outcome = el("div", { id: "save-outcome", "aria-live": "polite" });
  const current = (): Edit => ({ ...edit, mine: text.value });
  replace(
    p.target,
    el("h2", {}, `${p.scope} / ${p.key}${edit.base === null ? " (new)" : ""}`),
    el("p", { class: "meta" }, `Opened at generation ${edit.generation}. Saving never overwrites a newer version.`),
    restored
      ? el(
          "p",
          { class: "notice", role: "status", id: "draft-restored" },
          `Your unsaved text, started from generation ${edit.generation}, is back (this tab kept it).`,
          " ",
          button("Discard it", () => void discard(p), { class: "link", id: "discard-draft" }),
        )
      : null,
    text,
    el(
      "div",
      { class: "row" },
      sendButton("Save", () => attempt(p, current(), outcome), { class: "primary", id: "save" }),
      edit.base === null
        ? null
        : button(
            "Delete…",
            () => {
              const keep = button("Keep it", () => replace(outcome));
              replace(
                outcome,
                el(
                  "div",
                  { class: "confirm", role: "alertdialog", "aria-label": "Confirm deleting" },
                  el("p", {}, `Delete ${p.key} from ${p.scope}?`),
                  el(
                    "div",
                    { class: "row" },
                    sendButton("Delete it", () => attempt(p, { ...edit, mine: null }, outcome), { class: "danger", id: "confirm-delete" }),
                    keep,
                  ),
                ),
              );
              keep.focus();
            },
            { class: "danger", id: "delete" },
          ),
      button("Back to the scope", () => void openScope(p.tenant, p.scope, p.target)),
      edit.base === null ? null : el("a", { href: historyHref(p.tenant, { scope: p.scope, key: p.key }), id: "record-history" }, "History"),
    ),
    outcome,
  );
  text.focus();
}

async function discard(p: Place): Promise<void> {
  sessionStorage.removeItem(draftKey(p));
  await openScope(p.tenant, p.scope, p.target);
}

/** The stored version now: its content (null when the record is gone) and the scope's generation. */
async function theirs(p: Place): Promise<{ generation: string; text: string | null }> {
  try {
    const answer = await get(tenantPath(p.tenant, "/records:get"), { scope: p.scope, key: p.key });
    return { generation: String(answer.generation ?? "0"), text: answer.record?.content ?? "" };
  } catch (error) {
    if (!(error instanceof ApiError && error.reason === "RECORD_NOT_FOUND")) throw error;
    const listed = await get(tenantPath(p.tenant, "/records"), { scope: p.scope, page_size: 1 });
    return { generation: String(listed.generation ?? "0"), text: null };
  }
}

/** The record's content at scope generation ``generation`` from its revisions (the newest at or
 * below it: null after a delete), or ``null`` when no revision says: none is kept that old. */
async function baseFromRevisions(p: Place, generation: string): Promise<{ text: string | null } | null> {
  let answer: Json;
  try {
    answer = await get(tenantPath(p.tenant, "/records:revisions"), { scope: p.scope, key: p.key });
  } catch (error) {
    if (error instanceof ApiError && error.reason === "RECORD_NOT_FOUND") return null;
    throw error;
  }
  const atOrBefore = ((answer.revisions ?? []) as Json[]).filter((r) => BigInt(r.generation ?? 0) <= BigInt(generation));
  const last = atOrBefore[atOrBefore.length - 1];
  if (!last) return null;
  return { text: last.op === "delete" ? null : String(last.content ?? "") };
}

async function conflict(p: Place, kept: Edit, notice: string): Promise<void> {
  let now: { generation: string; text: string | null };
  let edit = kept;
  let baseSource = "kept in this tab: the record's revisions no longer go back to it";
  try {
    const fetched = await baseFromRevisions(p, kept.generation);
    if (fetched) {
      edit = { ...kept, base: fetched.text };
      baseSource = "from the record's revisions";
    }
    now = await theirs(p);
  } catch (error) {
    replace(p.target.querySelector("#save-outcome") ?? p.target, errorBox(error));
    return;
  }
  const choices = el("div", { id: "merge" });
  const outcome = el("div", { id: "save-outcome", "aria-live": "polite" });
  const overwrite = button("Overwrite theirs…", () => confirmOverwrite(p, edit, now, outcome), { class: "danger", id: "overwrite" });
  replace(
    p.target,
    el("h2", { tabindex: "-1", id: "conflict-heading" }, `Conflict: ${p.key} changed while you edited it`),
    el(
      "p",
      { class: "error", role: "alert", id: "conflict" },
      notice ||
        `Someone else (another tab, an agent or a consolidator) saved ${p.scope} since you opened it at generation ${edit.generation}: it is now at generation ${now.generation}. Nothing of yours was written.`,
    ),
    el(
      "div",
      { class: "three-way" },
      el("div", {}, el("h3", {}, `Base (generation ${edit.generation}, where you started; `, el("span", { id: "base-source" }, baseSource), ")"), linesMarked(edit.base, edit.base, "base", "Base")),
      el("div", {}, el("h3", {}, `Theirs (stored, generation ${now.generation})`), linesMarked(edit.base, now.text, "theirs", "Theirs, compared with the base")),
      el("div", {}, el("h3", {}, "Mine (not saved)"), linesMarked(edit.base, edit.mine, "yours", "Mine, compared with the base")),
    ),
    choices,
    el(
      "div",
      { class: "row" },
      button("Reload theirs (drop mine)", () => editor(p, { generation: now.generation, base: now.text, mine: now.text ?? "" }, false), { id: "reload" }),
      overwrite,
    ),
    outcome,
  );
  keepDraft(p, edit);
  if (edit.mine === null || now.text === null) {
    replace(
      choices,
      el(
        "p",
        {},
        edit.mine === null
          ? "You deleted the record and they changed it: reload theirs, or overwrite theirs to delete it anyway."
          : "They deleted the record: reload (drop yours), or overwrite theirs to write yours again.",
      ),
    );
    overwrite.focus();
    return;
  }
  drawMerge(p, edit, { generation: now.generation, text: now.text }, choices, outcome);
}

/** The merge: agreed lines as they are, each overlap with a choice; saved against theirs. */
function drawMerge(p: Place, edit: Edit, now: { generation: string; text: string }, target: HTMLElement, outcome: HTMLElement): void {
  const blocks: Block[] = merge3(edit.base ?? "", now.text, edit.mine ?? "");
  const overlaps = blocks.filter((b) => b.kind === "overlap");
  const picked: (Choice | undefined)[] = overlaps.map(() => undefined);
  const result = el("pre", { id: "merged", class: "diff", tabindex: "0", "aria-label": "The merge" });
  const saveMerge = sendButton("Save the merge", () => saveIt(), { class: "primary", id: "save-merge" }) as HTMLButtonElement;
  const editMerge = button("Edit the merge first", () => {
    const text = mergedText(blocks, picked);
    if (text !== null) editor(p, { generation: now.generation, base: now.text, mine: text }, false);
  }, { id: "edit-merge" }) as HTMLButtonElement;
  const show = (): void => {
    const text = mergedText(blocks, picked);
    const open = picked.filter((c) => !c).length;
    replace(result, text ?? `${open} overlap${open === 1 ? "" : "s"} still to settle.`);
    saveMerge.disabled = editMerge.disabled = text === null;
  };
  const saveIt = async (): Promise<void> => {
    const text = mergedText(blocks, picked);
    if (text === null) return;
    // The merge includes theirs: saved against their generation; if someone saved again since,
    // it is refused like any stale save and merged again, with theirs as the new base.
    const next: Edit = { generation: now.generation, base: now.text, mine: text };
    await attempt(p, next, outcome, next.generation, `Not saved: someone saved ${p.scope} again while you merged. Your merge is "mine" now; merge it with theirs again.`);
  };
  const fieldsets = overlaps.map((block, n) => {
    if (block.kind !== "overlap") return null;
    const name = `overlap-${n}`;
    const option = (choice: Choice, label: string): HTMLElement => {
      const input = el("input", { type: "radio", name, value: choice, id: `${name}-${choice}` }) as HTMLInputElement;
      input.addEventListener("change", () => {
        picked[n] = choice;
        show();
      });
      return el("label", { for: input.id, class: "choice" }, input, label);
    };
    return el(
      "fieldset",
      { class: "overlap", "data-overlap": String(n) },
      el("legend", {}, `Overlap ${n + 1} of ${overlaps.length}: both changed ${block.base.length ? `the lines “${block.base.join(" / ")}”` : "the same place"}`),
      el(
        "div",
        { class: "sides" },
        el("div", {}, el("h4", {}, "Theirs"), el("pre", { class: "diff" }, block.theirs.join("\n") || "(removed)")),
        el("div", {}, el("h4", {}, "Mine"), el("pre", { class: "diff" }, block.mine.join("\n") || "(removed)")),
      ),
      el("div", { class: "row", role: "radiogroup", "aria-label": `Keep in overlap ${n + 1}` }, option("theirs", "Keep theirs"), option("mine", "Keep mine"), option("both", "Keep both (theirs first)")),
    );
  });
  replace(
    target,
    el("h3", {}, "Merge"),
    el(
      "p",
      { id: "merge-summary" },
      overlaps.length
        ? `Their changes and yours are kept where they do not overlap. ${overlaps.length} overlap${overlaps.length === 1 ? "" : "s"}: choose what to keep in each.`
        : "Their changes and yours do not overlap: the merge keeps both.",
    ),
    ...fieldsets,
    el("h4", {}, "The merge"),
    result,
    el("div", { class: "row" }, saveMerge, editMerge),
  );
  show();
  ((target.querySelector("input[type=radio]") as HTMLElement | null) ?? saveMerge).focus();
}

function confirmOverwrite(p: Place, edit: Edit, now: { generation: string; text: string | null }, outcome: HTMLElement): void {
  const cancel = button("Cancel", () => replace(outcome));
  replace(
    outcome,
    el(
      "div",
      { class: "confirm", role: "alertdialog", "aria-label": "Confirm overwriting theirs" },
      el(
        "p",
        {},
        edit.mine === null
          ? `Delete ${p.key} although it changed at generation ${now.generation}? Their version is lost from the record.`
          : `Replace generation ${now.generation} of ${p.key} with yours? Their changes shown above are lost from the record.`,
      ),
      el(
        "div",
        { class: "row" },
        sendButton("Overwrite theirs", () => attempt(p, edit, outcome, now.generation), { class: "danger", id: "confirm-overwrite" }),
        cancel,
      ),
    ),
  );
  cancel.focus();
}
