// The history view: a memory's or a record's revisions oldest first (docs/revisions.md) — what
// each did, who made it through which surface, when, the change as a diff against the revision
// before, its audit-ledger entry — with revert. A revert is a new revision: RevertMemory, or
// RevertRecord under the explicit revision contract (the scope's generation this page read).
// A memory made by a fast write shows its event too: accepted, then applied (or failed).

import { ApiError, type Json, get, post, requestId, tenantPath } from "./api.js";
import { linesMarked, wordsMarked } from "./diffs.js";
import { button, el, errorBox, replace, sendButton, timeEl } from "./dom.js";

// How far before a memory's creation its fast write may have been accepted: the events of that
// window are read until one accepted after the memory was created.
const EVENT_WINDOW_MS = 24 * 3600 * 1000;
const EVENT_PAGE = 1000;

/** Where the history view of a memory or a record is: a link survives a reload. */
export function historyHref(tenant: string, subject: { memory: string } | { scope: string; key: string }): string {
  return `?${new URLSearchParams({ tenant, view: "history", ...subject }).toString()}`;
}

function byWhom(by: Json | undefined): string {
  const surface = by?.surface ? `through ${by.surface}` : "before revisions were kept";
  return by?.tokenName ? `${by.tokenName}, ${surface}` : surface;
}

function kindOf(revision: Json): string {
  return String(revision.kind ?? "").replace("REVISION_KIND_", "").toLowerCase();
}

/** Whether two memory revisions left the same text and metadata (a revert between them writes
 * nothing). */
function sameContent(a: Json, b: Json): boolean {
  const metadata = (r: Json): string => JSON.stringify(Object.entries((r.metadata ?? {}) as Record<string, string>).sort());
  return a.text === b.text && metadata(a) === metadata(b);
}

/** A revert's confirmation in ``box``; ``run`` writes it. */
function confirmRevert(box: HTMLElement, question: string, run: () => Promise<void>, back: HTMLElement): void {
  const keep = button("Cancel", () => {
    replace(box);
    back.focus();
  });
  replace(
    box,
    el(
      "div",
      { class: "confirm", role: "alertdialog", "aria-label": "Confirm reverting" },
      el("p", {}, question),
      el("div", { class: "row" }, sendButton("Revert", run, { class: "danger", id: "confirm-revert" }), keep),
    ),
  );
  keep.focus();
}

export async function historyView(tenant: string, main: HTMLElement): Promise<void> {
  const params = new URLSearchParams(location.search);
  const memory = params.get("memory");
  const scope = params.get("scope");
  const key = params.get("key");
  if (memory) await memoryHistory(tenant, memory, main);
  else if (scope && key) await recordHistory(tenant, scope, key, main);
  else replace(main, el("h1", {}, "History"), el("p", {}, "Open a memory or a record, then its History."));
}

// -- a memory -----------------------------------------------------------------------------------

async function memoryHistory(tenant: string, id: string, main: HTMLElement, notice: HTMLElement | null = null): Promise<void> {
  const list = el("div", { id: "history" }, "Reading the revisions…");
  const events = el("section", { id: "memory-events", "aria-label": "Its fast write" });
  replace(
    main,
    el("h1", { tabindex: "-1", id: "history-heading" }, `History of memory #${id}`),
    el("p", { class: "meta" }, el("a", { href: `?${new URLSearchParams({ tenant }).toString()}` }, "Back to the memories")),
    notice,
    list,
    events,
  );
  try {
    const [{ revisions = [] }, { memory }] = await Promise.all([
      get(tenantPath(tenant, `/memories/${encodeURIComponent(id)}/revisions`)),
      get(tenantPath(tenant, `/memories/${encodeURIComponent(id)}`)),
    ]);
    const newest = (revisions as Json[])[revisions.length - 1];
    const items = (revisions as Json[]).map((r, n) => {
      const before = n > 0 ? (revisions as Json[])[n - 1] : null;
      const outcome = el("div", { "aria-live": "polite" });
      const revert: HTMLElement | null =
        newest && !sameContent(r, newest) && !memory.mergedInto && !memory.forgotten
          ? button(
              `Revert to revision ${r.revision}…`,
              () =>
                confirmRevert(
                  outcome,
                  `Restore the text and metadata of revision ${r.revision} as a new revision of memory #${id}?`,
                  async () => {
                    try {
                      const answer = await post(tenantPath(tenant, `/memories/${encodeURIComponent(id)}:revert`), {
                        revision: r.revision,
                        requestId: requestId(),
                      });
                      await memoryHistory(
                        tenant,
                        id,
                        main,
                        el(
                          "p",
                          { class: "notice", role: "status", id: "reverted" },
                          answer.revision
                            ? `Reverted: revision ${r.revision} is restored as revision ${answer.revision}.`
                            : `Memory #${id} has the content of revision ${r.revision} already: nothing was written.`,
                        ),
                      );
                    } catch (error) {
                      replace(outcome, errorBox(error));
                    }
                  },
                  revert as HTMLElement,
                ),
              { class: "danger", "data-revert": String(r.revision) },
            )
          : null;
      const metadata = Object.entries((r.metadata ?? {}) as Record<string, string>);
      const changed = (r.changed ?? []) as string[];
      return el(
        "li",
        { "data-revision": String(r.revision), "data-kind": kindOf(r) },
        el(
          "div",
          { class: "meta" },
          el("strong", {}, `Revision ${r.revision}: ${kindOf(r)}`),
          timeEl(r.at),
          el("span", {}, byWhom(r.by)),
          changed.length ? el("span", {}, `changed ${changed.join(", ")}`) : null,
          r.revertedTo ? el("span", {}, `restored revision ${r.revertedTo}`) : null,
          r.relatedMemoryId ? el("span", {}, `${kindOf(r) === "merged" ? "into" : "by"} memory #${r.relatedMemoryId}`) : null,
          el("span", {}, r.ledgerSeq ? `audit entry ${r.ledgerSeq}` : "no audit entry named"),
        ),
        wordsMarked(before ? String(before.text ?? "") : String(r.text ?? ""), String(r.text ?? ""), `Text after revision ${r.revision}`),
        metadata.length && (!before || changed.includes("metadata"))
          ? el("p", { class: "meta" }, `metadata ${metadata.map(([k, v]) => `${k}=${v}`).join(", ")}`)
          : null,
        revert,
        outcome,
      );
    });
    replace(
      list,
      items.length
        ? el("ol", { class: "history", id: "memory-revisions" }, ...items)
        : el("p", {}, "No revisions: a forgotten memory keeps none."),
    );
    await memoryEvent(tenant, id, String(memory.createdAt ?? ""), events);
  } catch (error) {
    replace(list, errorBox(error));
  }
  // After a revert the heading takes the focus (the notice is read next); a first draw leaves it
  // at the top of the page.
  if (notice) (main.querySelector("#history-heading") as HTMLElement | null)?.focus();
}

/** The fast write that created memory ``id``, if one did: ListEvents from a day before its
 * creation, until an event accepted after it (events are listed in the order accepted). */
async function memoryEvent(tenant: string, id: string, createdAt: string, target: HTMLElement): Promise<void> {
  if (!createdAt) return;
  const created = Date.parse(createdAt);
  const after = new Date(created - EVENT_WINDOW_MS).toISOString();
  let pageToken = "";
  try {
    do {
      const answer = await get(tenantPath(tenant, "/events"), { accepted_after: after, page_size: EVENT_PAGE, page_token: pageToken });
      let past = false;
      for (const event of (answer.events ?? []) as Json[]) {
        if (((event.createdMemoryIds ?? []) as string[]).map(String).includes(id)) {
          drawEvent(event, target);
          return;
        }
        past ||= Date.parse(event.acceptedAt ?? "") > created;
      }
      pageToken = past ? "" : (answer.nextPageToken ?? "");
    } while (pageToken);
    replace(target, el("p", { class: "meta", id: "no-event" }, "Written directly (not a fast write): no event."));
  } catch (error) {
    replace(target, errorBox(error));
  }
}

function drawEvent(event: Json, target: HTMLElement): void {
  const status = String(event.status ?? "").toLowerCase();
  replace(
    target,
    el("h2", {}, `Its fast write: event ${event.eventId}`),
    el(
      "ol",
      { class: "history", id: "event-steps" },
      el("li", { "data-step": "accepted" }, "accepted ", timeEl(event.acceptedAt)),
      el(
        "li",
        { "data-step": status },
        `${status === "succeeded" ? "applied" : status} `,
        event.finishedAt ? timeEl(event.finishedAt) : null,
        event.latencyMs ? ` (${Math.round(Number(event.latencyMs))} ms after, ${event.attempts ?? 1} attempt${event.attempts === 1 ? "" : "s"})` : null,
      ),
    ),
  );
}

// -- a record -----------------------------------------------------------------------------------

async function recordHistory(tenant: string, scope: string, key: string, main: HTMLElement, notice: HTMLElement | null = null): Promise<void> {
  const list = el("div", { id: "history" }, "Reading the revisions…");
  replace(
    main,
    el("h1", { tabindex: "-1", id: "history-heading" }, `History of ${scope} / ${key}`),
    el("p", { class: "meta" }, el("a", { href: `?${new URLSearchParams({ tenant, view: "records" }).toString()}` }, "Back to the records")),
    notice,
    list,
  );
  const again = (said: HTMLElement): Promise<void> => recordHistory(tenant, scope, key, main, said);
  try {
    const answer = await get(tenantPath(tenant, "/records:revisions"), { scope, key });
    const revisions = (answer.revisions ?? []) as Json[];
    const generation = String(answer.generation ?? "0");
    const newest = revisions[revisions.length - 1];
    const items = revisions.map((r, n) => {
      const before = n > 0 ? revisions[n - 1] : null;
      const content = r.op === "delete" ? null : String(r.content ?? "");
      const outcome = el("div", { "aria-live": "polite" });
      const restorable = r.op === "put" && r !== newest && (newest.op === "delete" || content !== String(newest.content ?? ""));
      const revert: HTMLElement | null = restorable
        ? button(
            `Restore generation ${r.generation}…`,
            () =>
              confirmRevert(
                outcome,
                `Put the content of generation ${r.generation} back as a new generation of ${key}? (Only if ${scope} is still at generation ${generation}.)`,
                async () => {
                  try {
                    const done = await post(tenantPath(tenant, "/records:revert"), {
                      scope,
                      key,
                      generation: String(r.generation),
                      expectedGeneration: generation,
                      requestId: requestId(),
                    });
                    await again(
                      el("p", { class: "notice", role: "status", id: "reverted" }, `Restored: generation ${r.generation}'s content is generation ${done.generation}.`),
                    );
                  } catch (error) {
                    if (error instanceof ApiError && error.reason === "GENERATION_MISMATCH")
                      await again(
                        el(
                          "p",
                          { class: "error", role: "alert", id: "revert-refused" },
                          `Not restored: someone saved ${scope} after generation ${generation}, which this history showed. Nothing was written; here is the history now.`,
                        ),
                      );
                    else replace(outcome, errorBox(error));
                  }
                },
                revert as HTMLElement,
              ),
            { class: "danger", "data-revert": String(r.generation) },
          )
        : null;
      return el(
        "li",
        { "data-generation": String(r.generation), "data-op": String(r.op) },
        el(
          "div",
          { class: "meta" },
          el("strong", {}, `Generation ${r.generation}: ${r.op}`),
          timeEl(r.at),
          el("span", {}, byWhom(r.by)),
          el("span", {}, `by ${r.source}`),
          el("span", {}, `audit entry ${r.ledgerSeq ?? 0}`),
        ),
        linesMarked(before && before.op !== "delete" ? String(before.content ?? "") : null, content, "", `Content after generation ${r.generation}`),
        revert,
        outcome,
      );
    });
    replace(
      list,
      el("p", { class: "meta" }, `${scope} is at generation ${generation}.`),
      el("ol", { class: "history", id: "record-revisions" }, ...items),
    );
  } catch (error) {
    replace(list, errorBox(error));
  }
  // After a revert the heading takes the focus (the notice is read next); a first draw leaves it
  // at the top of the page.
  if (notice) (main.querySelector("#history-heading") as HTMLElement | null)?.focus();
}
