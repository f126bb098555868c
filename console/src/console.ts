// The Mnemosyne console: one page that calls the server's HTTP/JSON API (docs/http-api.md) of its
// own origin and nothing else. Every piece of text from the server is put in the page as a text
// node (dom.ts), never parsed as HTML: agents retain web content, and it is hostile. The token is
// kept in this tab's sessionStorage only, never in a URL (api.ts).

import { ApiError, type Json, failure, get, headers, post, setToken, tenantPath, token } from "./api.js";
import { button, el, errorBox, replace, sendButton, timeEl } from "./dom.js";
import { historyView } from "./history.js";
import { memoriesView } from "./memories.js";
import { acrossTenants, overviewView } from "./overview.js";
import { forgetDrafts, recordsView } from "./records.js";

const TENANT_PAGE = 10;

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const whoBox = document.getElementById("who") as HTMLElement;

// -- state and navigation -------------------------------------------------------------------------

interface Caller {
  name: string;
  tenants: string[];
  admin: boolean;
}

let caller: Caller | null = null;
let leaving: (() => void) | null = null; // stops the current view's live work (the event stream)

const VIEWS: [string, string][] = [
  ["memories", "Memories"],
  ["overview", "Overview"],
  ["events", "Events"],
  ["records", "Records"],
  ["hotpath", "Hot path"],
  ["integrity", "Integrity"],
];

function place(): { tenant: string; view: string } {
  const params = new URLSearchParams(location.search);
  const tenant = params.get("tenant") ?? "";
  return { tenant, view: params.get("view") ?? (tenant ? "memories" : "tenants") };
}

function go(view: string, tenant: string): void {
  const params = new URLSearchParams();
  if (tenant) params.set("tenant", tenant);
  if (view !== (tenant ? "memories" : "tenants")) params.set("view", view);
  const search = params.toString();
  history.pushState(null, "", search ? `?${search}` : location.pathname);
  void render();
}

window.addEventListener("popstate", () => void render());

function drawHeader(tenant: string, view: string): void {
  replace(
    nav,
    button("Tenants", () => go("tenants", ""), view === "tenants" ? { "aria-current": "page" } : {}),
    ...(tenant
      ? [
          el("span", { class: "meta" }, "tenant ", el("strong", {}, tenant)),
          ...VIEWS.map(([name, label]) =>
            button(label, () => go(name, tenant), view === name ? { "aria-current": "page" } : {}),
          ),
        ]
      : []),
  );
  if (!caller) {
    replace(whoBox);
    return;
  }
  replace(
    whoBox,
    caller.name ? `signed in as ${caller.name}${caller.admin ? " (admin)" : ""}` : "no tokens on this server (admin)",
    token ? button("Sign out", signOut) : null,
  );
}

function signOut(): void {
  setToken("", false);
  forgetDrafts(); // they hold records' text, which the next to sign in here may not be allowed to read
  caller = null;
  void render();
}

async function render(): Promise<void> {
  leaving?.();
  leaving = null;
  const { tenant, view } = place();
  if (!caller) {
    try {
      caller = (await get("/v1/whoami")) as Caller;
      caller = { name: caller.name ?? "", tenants: caller.tenants ?? [], admin: caller.admin ?? false };
    } catch (error) {
      drawHeader("", "");
      signIn(error instanceof ApiError && error.httpStatus === 401 && !token ? null : error);
      return;
    }
  }
  const views: Record<string, (tenant: string, main: HTMLElement) => void | Promise<void>> = {
    memories: memoriesView,
    overview: overviewView,
    events: eventsView,
    records: recordsView,
    hotpath: hotPathView,
    integrity: integrityView,
    history: historyView, // of one memory or record (?memory= or ?scope=&key=), opened from it
  };
  // Only a view's own name: ?view=constructor or __proto__ (a URL edited by hand) is no view, and
  // the tenants are shown under their own header (not the tenant's tabs, none of them current).
  const draw = tenant && Object.hasOwn(views, view) ? views[view] : undefined;
  drawHeader(draw ? tenant : "", draw ? view : "tenants");
  await (draw ? draw(tenant, main) : tenantsView());
}

// -- sign in --------------------------------------------------------------------------------------

function signIn(error: unknown): void {
  const input = el("input", {
    type: "password",
    id: "token",
    name: "token",
    autocomplete: "off",
    required: true,
    class: "wide",
  }) as HTMLInputElement;
  const form = el(
    "form",
    { class: "row", id: "sign-in" },
    el("label", { for: "token" }, "Token"),
    input,
    el("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    // A character no request header carries makes fetch throw before anything is sent: say so,
    // not "the server could not be reached" (the Python client's token_problem).
    const bad = [...input.value.trim()].find((c) => c < " " || c > "~");
    if (bad) {
      const code = `U+${bad.codePointAt(0)?.toString(16).toUpperCase().padStart(4, "0")}`;
      signIn(new ApiError(0, 0, "TOKEN_MALFORMED", `the token holds '${bad}' (${code}), which no request header carries: a token is printable ASCII`, {}));
      return;
    }
    setToken(input.value.trim(), false);
    caller = null;
    void (async () => {
      try {
        const who = await get("/v1/whoami");
        caller = { name: who.name ?? "", tenants: who.tenants ?? [], admin: who.admin ?? false };
        setToken(token, true);
        await render();
      } catch (failed) {
        setToken("", false);
        signIn(failed);
      }
    })();
  });
  replace(
    main,
    el("h1", {}, "Sign in"),
    el("p", {}, "Paste a token of this server. It is kept in this tab only, until you close it or sign out."),
    error ? errorBox(error, "sign-in-error") : null,
    form,
  );
  input.focus();
}

// -- tenants --------------------------------------------------------------------------------------

async function tenantsView(): Promise<void> {
  const who = caller as Caller;
  const open = el("input", { id: "open-tenant", placeholder: "tenant name", "aria-label": "Tenant name" }) as HTMLInputElement;
  const openForm = el("form", { class: "row" }, open, el("button", { type: "submit" }, "Open tenant"));
  openForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (open.value.trim()) go("memories", open.value.trim());
  });
  const table = el("div", { id: "tenants" });
  const across = el("div", { id: "across-tenants" });
  replace(main, el("h1", {}, "Tenants"), openForm, table, across);
  if (!who.admin) {
    drawTenants(table, who.tenants, [], null);
    return;
  }
  const tokens: string[] = [""];
  const page = async (index: number): Promise<void> => {
    try {
      const answer = await get("/v1/tenants", { page_size: TENANT_PAGE, page_token: tokens[index] });
      if (answer.nextPageToken) tokens[index + 1] = answer.nextPageToken;
      const pager = el(
        "div",
        { class: "row" },
        index > 0 ? button("Previous page", () => void page(index - 1), { id: "previous-tenants" }) : null,
        el("span", { class: "meta" }, `page ${index + 1}`),
        answer.nextPageToken ? button("Next page", () => void page(index + 1), { id: "next-tenants" }) : null,
      );
      drawTenants(table, answer.tenants ?? [], answer.damaged ?? [], pager);
    } catch (error) {
      replace(table, errorBox(error));
    }
  };
  await Promise.all([page(0), acrossTenants(across, (tenant) => go("overview", tenant))]);
}

function drawTenants(target: HTMLElement, tenants: string[], damaged: string[], pager: HTMLElement | null): void {
  if (!tenants.length) {
    replace(target, el("p", {}, "No tenants yet: a tenant appears with its first memory."), pager);
    return;
  }
  const rows = tenants.map((tenant) => {
    const memories = el("td", {}, "…");
    const size = el("td", {}, "…");
    const integrity = el("td", {}, damaged.includes(tenant) ? el("span", { class: "broken" }, "damaged file") : "…");
    if (!damaged.includes(tenant)) {
      get(tenantPath(tenant, "/stats")).then(
        (stats) => {
          replace(memories, String(stats.memories ?? 0));
          replace(size, `${Math.round(Number(stats.fileBytes ?? 0) / 1024)} KiB`);
        },
        (error) => replace(memories, errorBox(error)),
      );
      get(tenantPath(tenant, "/integrity")).then(
        (report) =>
          replace(
            integrity,
            report.valid
              ? el("span", { class: "valid" }, "valid")
              : el("span", { class: "broken" }, brokenAt(report)),
          ),
        (error) => replace(integrity, errorBox(error)),
      );
    }
    return el(
      "tr",
      { "data-tenant": tenant },
      el("td", {}, button(tenant, () => go("memories", tenant), { class: "link" })),
      memories,
      size,
      integrity,
    );
  });
  replace(
    target,
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, el("th", {}, "tenant"), el("th", {}, "memories"), el("th", {}, "files"), el("th", {}, "integrity"))),
      el("tbody", {}, ...rows),
    ),
    pager,
  );
}

// -- events ---------------------------------------------------------------------------------------

const STATUSES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED"];

function eventsView(tenant: string, main: HTMLElement): void {
  const filter = el(
    "select",
    { id: "event-status", "aria-label": "Show events of status" },
    el("option", { value: "" }, "all statuses"),
    ...STATUSES.map((s) => el("option", { value: s }, s.toLowerCase())),
  ) as HTMLSelectElement;
  const state = el("span", { class: "meta", id: "watch-state", role: "status" }, "connecting…");
  const body = el("tbody", { id: "events" });
  const events = new Map<string, Json>();
  const rows = new Map<string, HTMLElement>();
  const draw = (event: Json): void => {
    const id = String(event.eventId);
    const status = String(event.status ?? "PENDING");
    const row = el(
      "tr",
      { "data-event-id": id, "data-status": status },
      el("td", {}, id),
      el("td", { class: `status-${status}` }, status.toLowerCase()),
      el("td", {}, event.kind ?? ""),
      el("td", {}, timeEl(event.acceptedAt)),
      el("td", {}, (event.createdMemoryIds ?? []).map((m: string) => `#${m}`).join(" ")),
      el("td", {}, status === "FAILED" ? `${event.errorReason ?? ""}: ${event.errorMessage ?? ""}` : ""),
    );
    row.hidden = !!filter.value && filter.value !== status;
    const old = rows.get(id);
    if (old) old.replaceWith(row);
    else body.prepend(row);
    rows.set(id, row);
  };
  filter.addEventListener("change", () => {
    for (const [id, row] of rows) row.hidden = !!filter.value && filter.value !== String(events.get(id)?.status);
  });
  replace(
    main,
    el("h1", {}, "Events"),
    el("div", { class: "row" }, filter, state),
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, ...["event", "status", "kind", "accepted", "memories", "failure"].map((h) => el("th", {}, h)))),
      body,
    ),
  );
  const abort = new AbortController();
  leaving = () => abort.abort();
  let lastSequence = "";
  const watch = async (): Promise<void> => {
    while (!abort.signal.aborted) {
      try {
        const extra: Record<string, string> = lastSequence ? { "Last-Event-ID": lastSequence } : {};
        const response = await fetch(tenantPath(tenant, "/events:watch"), {
          headers: headers(extra),
          signal: abort.signal,
          cache: "no-store",
          credentials: "omit",
        });
        if (!response.ok || !response.body) throw await failure(response);
        replace(state, "live");
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end: number;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let name = "message";
            let data = "";
            let id = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("data:")) data += line.slice(5).trimStart();
              else if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("id:")) id = line.slice(3).trim();
            }
            if (!data) continue;
            const parsed = JSON.parse(data) as Json;
            if (name === "status") throw new ApiError(0, parsed.code ?? 0, (parsed.details ?? [])[0]?.reason ?? "", parsed.message ?? "", {});
            if (id) lastSequence = id;
            events.set(String(parsed.eventId), parsed);
            draw(parsed);
          }
        }
        replace(state, "reconnecting…");
      } catch (error) {
        if (abort.signal.aborted) return;
        replace(state, errorBox(error));
        if (error instanceof ApiError && error.httpStatus >= 400 && error.httpStatus < 500 && error.httpStatus !== 429) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  void watch();
  filter.focus();
}

// -- hot path ---------------------------------------------------------------------------------------

async function hotPathView(tenant: string, main: HTMLElement): Promise<void> {
  const status = el("div", { id: "hot-path-status" });
  const result = el("div", { id: "hot-path-result", "aria-live": "polite" });
  const act = (label: string, rest: string, body: Json, describe: (answer: Json) => string) =>
    sendButton(label, async () => {
      replace(result, `${label}…`);
      try {
        const answer = await post(tenantPath(tenant, rest), body);
        replace(result, el("p", { class: "notice", role: "status" }, describe(answer)));
      } catch (error) {
        replace(result, errorBox(error));
      }
      await load();
    });
  const load = async (): Promise<void> => {
    try {
      const s = await get(tenantPath(tenant, "/hotPath"));
      const facts: [string, string][] = [
        ["enabled", s.enabled ? "yes" : "no"],
        ["queue depth", String(s.queueDepth ?? 0)],
        ["oldest pending", `${Number(s.oldestPendingSeconds ?? 0).toFixed(1)} s`],
        ["accepted", String(s.accepted ?? 0)],
        ["succeeded", String(s.succeeded ?? 0)],
        ["failed", String(s.failed ?? 0)],
        ["duplicates", String(s.duplicates ?? 0)],
      ];
      replace(status, el("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
    } catch (error) {
      replace(status, errorBox(error));
    }
  };
  replace(
    main,
    el("h1", {}, "Hot path"),
    status,
    el(
      "div",
      { class: "row" },
      act("Enable", "/hotPath:enable", {}, () => "The hot path is on: fast writes are accepted and processed in the background."),
      act("Disable", "/hotPath:disable", { timeoutSeconds: 30 }, () => "The hot path is off: what was pending was processed first."),
      act("Flush", "/hotPath:flush", { timeoutSeconds: 30 }, (a) =>
        `Flushed ${a.flushed ?? 0} event(s): ${a.succeeded ?? 0} succeeded, ${a.failed ?? 0} failed${(a.failedEventIds ?? []).length ? ` (events ${(a.failedEventIds as string[]).join(", ")})` : ""}.`,
      ),
    ),
    result,
  );
  await load();
}

/** An invalid chain's verdict: the first bad entry (proto JSON leaves out a zero sequence). */
function brokenAt(report: Json): string {
  return report.firstBrokenAt ? `broken at ledger entry ${report.firstBrokenAt}` : "broken";
}

// -- integrity --------------------------------------------------------------------------------------

async function integrityView(tenant: string, main: HTMLElement): Promise<void> {
  const report = el("div", { id: "integrity" }, "Verifying…");
  replace(main, el("h1", {}, "Integrity"), report);
  try {
    const r = await get(tenantPath(tenant, "/integrity"));
    const hash = el("input", { id: "head-hash", readonly: true, class: "wide", value: r.headHash ?? "", "aria-label": "Head hash" }) as HTMLInputElement;
    const copied = el("span", { class: "meta", role: "status" });
    const problems = (r.problems ?? []) as Json[];
    replace(
      report,
      el("p", {}, el("span", { class: r.valid ? "valid" : "broken", id: "integrity-verdict" }, r.valid ? "valid" : brokenAt(r))),
      el(
        "dl",
        { class: "facts" },
        el("dt", {}, "entries checked"),
        el("dd", { id: "integrity-checked" }, String(r.checked ?? 0)),
        // A valid chain has no broken entry: the field is absent (JSON leaves out a zero), not 0.
        el("dt", {}, "first broken at"),
        el("dd", { id: "integrity-first-broken" }, r.valid ? "none: every entry checks" : r.firstBrokenAt ? `ledger entry ${r.firstBrokenAt}` : "no entry (see the problems)"),
      ),
      el(
        "div",
        { class: "row" },
        el("label", { for: "head-hash" }, "Head hash"),
        hash,
        button("Copy", () => {
          hash.select();
          navigator.clipboard?.writeText(hash.value).then(
            () => replace(copied, "copied"),
            () => replace(copied, "selected: press Ctrl+C"),
          );
        }),
        copied,
      ),
      el("p", { class: "meta" }, "Keep the head hash elsewhere: a rewrite of the whole file changes it."),
      problems.length
        ? el("ul", {}, ...problems.map((p) => el("li", {}, `${p.kind} at entry ${p.ledgerSeq}${p.memoryId ? ` (memory #${p.memoryId})` : ""}: ${p.detail}`)))
        : null,
    );
  } catch (error) {
    replace(report, errorBox(error));
  }
}


void render();
