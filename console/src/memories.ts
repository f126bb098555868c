// The memories view: search (Recall) and the memories newest first (ListMemories), each memory a
// card; the one clicked opens beside the list. A search's weaker hits — below a share of the best
// hit's score, fused scores being comparable only within one answer — are folded under one
// button, the words of the query are marked in each text, and each card's scope, speaker,
// thread and metadata are buttons that narrow the search to them.

import { type Json, get, post, requestId, tenantPath } from "./api.js";
import { type Child, button, el, errorBox, replace, sendButton, timeEl } from "./dom.js";
import { historyHref } from "./history.js";

const MEMORY_PAGE = 20;
const THREAD_PAGE = 50; // a page of a thread's turns; the view pages on to the thread's end
const SEARCH_K = 50;
// A hit scoring under this share of the best hit's score is a weaker match, folded away.
const RELEVANCE_FLOOR = 0.5;
// Words too common to mark in a text.
const UNMARKED = new Set(["a", "an", "and", "are", "at", "do", "does", "for", "in", "is", "it", "of", "on", "or", "the", "to", "was", "what", "when", "where", "who", "with"]);

/** What narrows a search: sent to Recall (scope, metadata) or applied to its hits here (speaker,
 * thread, time: Recall has no such filter). */
interface Filters {
  scope: string;
  metadata: Record<string, string>;
  speaker: string;
  thread: string;
  from: string; // yyyy-mm-dd, inclusive, on when it happened (else when it was retained)
  to: string;
}

function emptyFilters(): Filters {
  return { scope: "", metadata: {}, speaker: "", thread: "", from: "", to: "" };
}

/** The words of a query worth marking, as a pattern matching them at a word's start. */
function markPattern(query: string): RegExp | null {
  const words = [...new Set((query.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []).filter((w) => w.length > 1 && !UNMARKED.has(w)))];
  if (!words.length) return null;
  const escaped = words.sort((a, b) => b.length - a.length).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(`(?<![\\p{L}\\p{N}])(?:${escaped.join("|")})[\\p{L}\\p{N}]*`, "giu");
}

/** ``text`` as text nodes, with the matches of ``pattern`` in <mark> (never parsed as HTML). */
function markedText(text: string, pattern: RegExp | null): Child[] {
  if (!pattern) return [text];
  const parts: Child[] = [];
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    const start = match.index ?? 0;
    parts.push(text.slice(at, start), el("mark", {}, match[0]));
    at = start + match[0].length;
  }
  parts.push(text.slice(at));
  return parts;
}

function happened(memory: Json): string {
  return memory.occurredAt ?? memory.createdAt ?? "";
}

function passes(memory: Json, f: Filters): boolean {
  if (f.speaker && memory.speaker !== f.speaker) return false;
  if (f.thread && memory.thread?.id !== f.thread) return false;
  const day = happened(memory).slice(0, 10);
  if (f.from && day < f.from) return false;
  if (f.to && day > f.to) return false;
  return true;
}

interface Card {
  tenant: string;
  open: (id: string) => void;
  narrow?: (change: Partial<Filters>) => void;
  pattern?: RegExp | null;
}

function memoryCard(c: Card, memory: Json, extra: Child = null): HTMLElement {
  const id = String(memory.id);
  const facts = (memory.facts ?? []) as Json[];
  const metadata = Object.entries((memory.metadata ?? {}) as Record<string, string>);
  // A chip that narrows the search when searching, plain text otherwise.
  const chip = (label: string, change: Partial<Filters>, name: string): HTMLElement =>
    c.narrow
      ? button(label, () => c.narrow?.(change), { class: "chip", title: `Search only ${name}`, "data-filter": Object.keys(change)[0] })
      : el("span", { class: "chip" }, label);
  return el(
    "article",
    { class: "memory", "data-memory-id": id },
    el(
      "div",
      { class: "meta" },
      button(`#${id}`, () => c.open(id), { class: "link", "aria-label": `Open memory ${id}` }),
      extra,
      memory.scope ? chip(memory.scope, { scope: memory.scope }, `scope ${memory.scope}`) : null,
      memory.speaker ? chip(`said by ${memory.speaker}`, { speaker: memory.speaker }, `said by ${memory.speaker}`) : null,
      memory.thread?.id ? chip(`thread ${memory.thread.id} #${memory.thread.position ?? 0}`, { thread: memory.thread.id }, `thread ${memory.thread.id}`) : null,
      memory.occurredAt ? el("span", {}, "happened ", timeEl(memory.occurredAt)) : null,
      el("span", {}, "retained ", timeEl(memory.createdAt)),
      memory.supersededBy ? el("span", {}, "superseded by ", button(`#${memory.supersededBy}`, () => c.open(String(memory.supersededBy)), { class: "link" })) : null,
      memory.mergedInto ? el("span", {}, "near duplicate of ", button(`#${memory.mergedInto}`, () => c.open(String(memory.mergedInto)), { class: "link" })) : null,
      memory.forgotten ? el("span", { class: "broken" }, "forgotten") : null,
    ),
    el("p", { class: "text" }, ...markedText(memory.text ?? "", c.pattern ?? null)),
    metadata.length || facts.length
      ? el(
          "div",
          { class: "meta" },
          ...metadata.map(([k, v]) => chip(`${k}=${v}`, { metadata: { [k]: v } }, `metadata ${k}=${v}`)),
          ...facts.map((f) => el("span", { class: "fact" }, `${f.kind}: ${f.value}`)),
        )
      : null,
  );
}

async function openMemory(c: Card, target: HTMLElement, id: string, changed: () => void): Promise<void> {
  try {
    const { memory } = await get(tenantPath(c.tenant, `/memories/${encodeURIComponent(id)}`));
    const metadata = Object.entries((memory.metadata ?? {}) as Record<string, string>);
    const triples = (memory.triples ?? []) as Json[];
    const confirm = el("div", {});
    const thread = el("div", { id: "memory-thread" });
    const forget = button(
      "Forget…",
      () => {
        const keep = button("Keep it", () => {
          replace(confirm);
          forget.focus();
        });
        replace(
          confirm,
          el(
            "div",
            { class: "confirm", role: "alertdialog", "aria-label": "Confirm forgetting" },
            el("p", {}, `Forget memory #${id}? Recall will no longer find it and its text is removed; the audit ledger keeps that it existed.`),
            el(
              "div",
              { class: "row" },
              sendButton(
                "Forget it",
                async () => {
                  try {
                    await post(tenantPath(c.tenant, `/memories/${encodeURIComponent(id)}:forget`), { requestId: requestId() });
                    replace(target, el("p", { class: "notice", role: "status", id: "forgotten" }, `Memory #${id} is forgotten.`));
                    changed();
                  } catch (error) {
                    replace(confirm, errorBox(error));
                  }
                },
                { class: "danger", id: "confirm-forget" },
              ),
              keep,
            ),
          ),
        );
        keep.focus();
      },
      { class: "danger", id: "forget" },
    );
    const showThread = async (): Promise<void> => {
      try {
        const turns: Json[] = [];
        let pageToken = "";
        do {
          const answer = await get(tenantPath(c.tenant, "/memories"), { thread: memory.thread.id, page_size: THREAD_PAGE, page_token: pageToken });
          turns.push(...((answer.memories ?? []) as Json[]));
          pageToken = answer.nextPageToken ?? "";
        } while (pageToken);
        replace(
          thread,
          el("h3", {}, `Thread ${memory.thread.id}, in order`),
          el("ol", { class: "thread" }, ...turns.map((m) => el("li", { "data-memory-id": String(m.id), class: String(m.id) === id ? "current" : "" }, m.speaker ? `${m.speaker}: ` : "", m.text ?? ""))),
        );
      } catch (error) {
        replace(thread, errorBox(error));
      }
    };
    replace(
      target,
      el("h2", { tabindex: "-1", id: "memory-heading" }, `Memory #${id}`),
      memoryCard({ ...c, narrow: undefined, pattern: null }, memory),
      el(
        "dl",
        { class: "facts" },
        ...metadata.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
        ...triples.flatMap((t) => [el("dt", {}, "triple"), el("dd", {}, `${t.subject} · ${t.predicate} · ${t.object}`)]),
      ),
      el(
        "div",
        { class: "row" },
        memory.thread?.id ? button("Show the thread", () => void showThread(), { id: "show-thread" }) : null,
        memory.forgotten ? null : el("a", { href: historyHref(c.tenant, { memory: id }), id: "memory-history" }, "History"),
        memory.forgotten ? null : forget,
      ),
      confirm,
      thread,
    );
    (target.querySelector("#memory-heading") as HTMLElement).focus();
  } catch (error) {
    replace(target, errorBox(error));
  }
}

/** The filter fields; ``apply``: search again (``redraw``: the fields changed from outside). */
function filterForm(filters: Filters, apply: (redraw: boolean) => void): HTMLElement {
  const field = (name: keyof Filters, label: string, attrs: Record<string, string> = {}): HTMLElement => {
    const value = name === "metadata" ? Object.entries(filters.metadata).map(([k, v]) => `${k}=${v}`).join(", ") : filters[name];
    const input = el("input", { id: `filter-${name}`, name, value: String(value), ...attrs }) as HTMLInputElement;
    input.addEventListener("change", () => {
      if (name === "metadata") {
        filters.metadata = {};
        for (const pair of input.value.split(",")) {
          const at = pair.indexOf("=");
          if (at > 0) filters.metadata[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
        }
      } else filters[name] = input.value.trim();
      apply(false); // the fields stay, and the focus in them
    });
    return el("label", { class: "filter" }, label, input);
  };
  return el(
    "fieldset",
    { class: "filters", id: "search-filters" },
    el("legend", {}, "Only memories…"),
    field("scope", "in scope", { placeholder: "global" }),
    field("metadata", "with metadata", { placeholder: "key=value, key=value" }),
    field("speaker", "said by"),
    field("thread", "in thread"),
    field("from", "from", { type: "date" }),
    field("to", "to", { type: "date" }),
    button("Clear", () => {
      Object.assign(filters, emptyFilters());
      apply(true);
      (document.getElementById("clear-filters") as HTMLElement | null)?.focus();
    }, { id: "clear-filters" }),
  );
}

export async function memoriesView(tenant: string, main: HTMLElement): Promise<void> {
  const query = el("input", { type: "search", id: "search-query", "aria-label": "Search memories", placeholder: "search memories" }) as HTMLInputElement;
  const searchForm = el("form", { class: "row", role: "search" }, query, el("button", { type: "submit", class: "primary" }, "Search"));
  const filters = emptyFilters();
  const filterBox = el("div", {});
  const results = el("div", { id: "search-results", "aria-live": "polite" });
  const listing = el("div", { id: "memory-list" });
  const detail = el("section", { id: "memory-detail", "aria-label": "The memory opened" }, el("p", { class: "meta" }, "Open a memory (its number) to see it here."));
  let lastQuery = "";
  let searches = 0; // the answer of a search overtaken by a newer one is dropped
  const card: Card = {
    tenant,
    open: (id: string) => {
      for (const old of main.querySelectorAll(".memory.opened")) old.classList.remove("opened");
      for (const opened of main.querySelectorAll(`.memory[data-memory-id="${CSS.escape(id)}"]`)) opened.classList.add("opened");
      void openMemory(card, detail, id, () => refresh());
    },
  };
  const drawFilters = (): void =>
    replace(
      filterBox,
      filterForm(filters, (redraw) => {
        if (redraw) drawFilters();
        void search();
      }),
    );
  const search = async (): Promise<void> => {
    lastQuery = query.value.trim();
    const mine = ++searches;
    if (!lastQuery) {
      replace(results);
      return;
    }
    try {
      const answer = await post(tenantPath(tenant, "/memories:recall"), {
        query: lastQuery,
        k: SEARCH_K,
        scopes: filters.scope ? [filters.scope] : [],
        metadataEquals: filters.metadata,
      });
      if (mine !== searches) return;
      const hits = ((answer.hits ?? []) as Json[]).filter((hit) => passes(hit.memory, filters));
      const best = Number(hits[0]?.score ?? 0);
      const strong = hits.filter((hit) => Number(hit.score ?? 0) >= best * RELEVANCE_FLOOR);
      const weak = hits.slice(strong.length);
      const shown: Card = {
        ...card,
        pattern: markPattern(lastQuery),
        narrow: (change) => {
          Object.assign(filters, change, change.metadata ? { metadata: { ...filters.metadata, ...change.metadata } } : {});
          drawFilters();
          void search();
        },
      };
      const draw = (hit: Json): HTMLElement =>
        memoryCard(
          shown,
          hit.memory,
          el("span", { class: "score", title: `vector ${Number(hit.vectorScore ?? 0).toFixed(3)}, text ${Number(hit.textScore ?? 0).toFixed(3)}` }, `score ${Number(hit.score ?? 0).toFixed(3)}`),
        );
      const weaker = el("div", { id: "weaker-matches" });
      if (weak.length) {
        const unfold = button(`${weak.length} weaker match${weak.length === 1 ? "" : "es"}`, () => {
          replace(weaker, ...weak.map(draw));
          (weaker.querySelector("button") as HTMLElement | null)?.focus();
        }, { id: "show-weaker", class: "link" });
        replace(weaker, unfold);
      }
      replace(
        results,
        el("h2", {}, `Search: ${strong.length} found${weak.length ? `, and ${weak.length} weaker` : ""}`),
        hits.length ? null : el("p", {}, "Nothing found. Try other words, or clear the filters."),
        ...strong.map(draw),
        weaker,
      );
    } catch (error) {
      if (mine === searches) replace(results, errorBox(error));
    }
  };
  const refresh = (): void => {
    void list();
    if (lastQuery) void search();
  };
  searchForm.addEventListener("submit", (event) => {
    event.preventDefault();
    void search();
  });
  // ListMemories newest first, a page at a time; the tokens of the pages seen so far let
  // "Newer" go back.
  const tokens: string[] = [""];
  const list = async (index = 0): Promise<void> => {
    try {
      const answer = await get(tenantPath(tenant, "/memories"), {
        page_size: MEMORY_PAGE,
        page_token: tokens[index],
        newest_first: true,
      });
      const memories: Json[] = answer.memories ?? [];
      if (answer.nextPageToken) tokens[index + 1] = answer.nextPageToken;
      replace(
        listing,
        el("h2", {}, `Memories, newest first (page ${index + 1})`),
        memories.length ? null : el("p", {}, "No memories yet."),
        ...memories.map((memory) => memoryCard(card, memory)),
        el(
          "div",
          { class: "row" },
          index > 0 ? button("Newer", () => void list(index - 1), { id: "newer-memories" }) : null,
          answer.nextPageToken ? button("Older", () => void list(index + 1), { id: "older-memories" }) : null,
        ),
      );
    } catch (error) {
      replace(listing, errorBox(error));
    }
  };
  drawFilters();
  replace(
    main,
    el("h1", {}, "Memories"),
    searchForm,
    filterBox,
    el("div", { class: "beside" }, el("div", { class: "cards" }, results, listing), detail),
  );
  query.focus();
  await list();
}
