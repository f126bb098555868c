// The Mnemosyne console: one page that calls the server's HTTP/JSON API (docs/http-api.md) of its
// own origin and nothing else. Every piece of text from the server is put in the page as a text
// node (createTextNode / textContent), never parsed as HTML: agents retain web content, and it
// is hostile. The token is kept in this tab's sessionStorage only, never in a URL.

type Json = { [key: string]: any };
type Query = Record<string, string | number | boolean | undefined>;

const TOKEN_KEY = "mnemosyne-console-token";
const TENANT_PAGE = 10;
const MEMORY_PAGE = 20;

// -- the API --------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(
    readonly httpStatus: number,
    readonly code: number,
    readonly reason: string,
    readonly detail: string,
    readonly metadata: Record<string, string>,
  ) {
    super(detail);
  }
}

let token = sessionStorage.getItem(TOKEN_KEY) ?? "";

function headers(extra: Record<string, string> = {}): Headers {
  const h = new Headers(extra);
  if (token) h.set("Authorization", `Bearer ${token}`);
  return h;
}

function url(path: string, query: Query = {}): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== "") params.append(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

async function failure(response: Response): Promise<ApiError> {
  let body: Json = {};
  try {
    body = await response.json();
  } catch {
    return new ApiError(response.status, 0, "", `the server answered ${response.status} without an explanation`, {});
  }
  const info = (body.details ?? []).find((d: Json) => String(d["@type"] ?? "").endsWith("google.rpc.ErrorInfo"));
  return new ApiError(response.status, body.code ?? 0, info?.reason ?? "", body.message ?? "", info?.metadata ?? {});
}

async function get(path: string, query: Query = {}): Promise<Json> {
  const response = await fetch(url(path, query), { headers: headers(), cache: "no-store", credentials: "omit" });
  if (!response.ok) throw await failure(response);
  return response.json();
}

async function post(path: string, body: Json = {}): Promise<Json> {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  if (!response.ok) throw await failure(response);
  return response.json();
}

function tenantPath(tenant: string, rest: string): string {
  return `/v1/tenants/${encodeURIComponent(tenant)}${rest}`;
}

function requestId(): string {
  return `console-${crypto.randomUUID()}`;
}

// What a person can do about each refusal, by its ErrorInfo reason.
const ADVICE: Record<string, string> = {
  TOKEN_MISSING: "This server needs a token. Sign in with one.",
  TOKEN_UNKNOWN: "The server does not know this token. Check it for typos, or ask the operator whether it was replaced.",
  TOKEN_MALFORMED: "That is not a token: it has characters a token never has. Paste it again, without spaces.",
  TENANT_FORBIDDEN: "Your token may not open this tenant. Sign in with a token that names it.",
  ADMIN_REQUIRED: "Only an admin token may do this (list every tenant). Sign in with one, or open one of your tenants.",
  TENANT_INVALID:
    "That is not a tenant name: 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or a digit.",
  TENANT_NOT_FOUND: "This tenant has no data (it was never written to, or it was erased).",
  TENANT_CORRUPT: "This tenant's file is damaged. An operator can restore it from a backup.",
  MEMORY_NOT_FOUND: "This memory does not exist in this tenant.",
  RECORD_NOT_FOUND: "This record does not exist (any more).",
  RECORD_KEY_INVALID: "That is not a record key: no '..', no leading '/', no control characters.",
  RECORD_TOO_LARGE: "This record is larger than the server allows. Split it into several records.",
  RECORDS_LIMIT: "This scope already holds as many records as the server allows. Delete one first.",
  RECORDS_CHANGED: "The records changed while they were being listed. Open the scope again.",
  GENERATION_MISMATCH: "Someone else saved this scope since you opened it.",
  QUEUE_FULL: "The server is busy with this tenant. Try again in a few seconds.",
  SHUTTING_DOWN: "The server is shutting down. Try again when it is back.",
  HOT_PATH_DISABLED: "The hot path is off for this tenant. Enable it first.",
  HOST_FORBIDDEN: "The server refuses this address. Open the console through an address the operator allowed.",
  ORIGIN_FORBIDDEN: "The server refuses requests from this page's origin.",
  QUERY_INVALID: "The search text is empty or too long.",
};

function explain(error: unknown): string {
  if (error instanceof ApiError) {
    const advice = ADVICE[error.reason];
    const said = error.detail ? ` (the server said: ${error.detail})` : "";
    if (advice) return `${advice}${said} [${error.reason}]`;
    if (error.reason) return `${error.detail || "The server refused."} [${error.reason}]`;
    return error.detail || `The server answered ${error.httpStatus}.`;
  }
  if (error instanceof TypeError) return "The server could not be reached. Is it running, and is this its address?";
  return String(error);
}

// -- building the page (text is always text) --------------------------------------------------------

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | boolean | ((event: Event) => void)>;

function el(tag: string, attrs: Attrs = {}, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === "function") node.addEventListener(key.replace(/^on/, ""), value);
    else if (value === true) node.setAttribute(key, "");
    else if (value !== false) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function button(label: string, onClick: () => void, attrs: Attrs = {}): HTMLElement {
  return el("button", { type: "button", ...attrs, onclick: () => onClick() }, label);
}

function errorBox(error: unknown, id = ""): HTMLElement {
  return el("p", { class: "error", role: "alert", ...(id ? { id } : {}) }, explain(error));
}

function replace(target: Element, ...children: Child[]): void {
  target.replaceChildren(...children.filter((c): c is Node | string | number => c !== null && c !== undefined && c !== false).map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
}

function when(stamp: string | undefined): string {
  return stamp ? new Date(stamp).toLocaleString() : "";
}

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
  token = "";
  caller = null;
  sessionStorage.removeItem(TOKEN_KEY);
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
  drawHeader(tenant, view);
  const views: Record<string, (tenant: string) => void | Promise<void>> = {
    memories: memoriesView,
    events: eventsView,
    records: recordsView,
    hotpath: hotPathView,
    integrity: integrityView,
  };
  const draw = tenant ? views[view] : undefined;
  await (draw ? draw(tenant) : tenantsView());
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
    token = input.value.trim();
    caller = null;
    void (async () => {
      try {
        const who = await get("/v1/whoami");
        caller = { name: who.name ?? "", tenants: who.tenants ?? [], admin: who.admin ?? false };
        sessionStorage.setItem(TOKEN_KEY, token);
        await render();
      } catch (failed) {
        token = "";
        sessionStorage.removeItem(TOKEN_KEY);
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
  replace(main, el("h1", {}, "Tenants"), openForm, table);
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
  await page(0);
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
              : el("span", { class: "broken" }, `broken at entry ${report.firstBrokenAt ?? "?"}`),
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

// -- memories -------------------------------------------------------------------------------------

function memoryCard(tenant: string, memory: Json, opened: () => void, extra: Child = null): HTMLElement {
  const id = String(memory.id);
  const facts = (memory.facts ?? []) as Json[];
  return el(
    "article",
    { class: "memory", "data-memory-id": id },
    el(
      "div",
      { class: "meta" },
      button(`#${id}`, () => void openMemory(tenant, id, opened), { class: "link", "aria-label": `Open memory ${id}` }),
      extra,
      el("span", {}, memory.scope ?? ""),
      el("span", {}, when(memory.createdAt)),
      memory.supersededBy ? el("span", {}, "superseded by ", link(tenant, memory.supersededBy, opened)) : null,
      memory.mergedInto ? el("span", {}, "near duplicate of ", link(tenant, memory.mergedInto, opened)) : null,
      memory.forgotten ? el("span", { class: "broken" }, "forgotten") : null,
    ),
    el("p", { class: "text" }, memory.text ?? ""),
    facts.length ? el("div", { class: "meta" }, ...facts.map((f) => el("span", { class: "fact" }, `${f.kind}: ${f.value}`))) : null,
  );
}

function link(tenant: string, id: string, opened: () => void): HTMLElement {
  return button(`#${id}`, () => void openMemory(tenant, String(id), opened), { class: "link" });
}

let detail: HTMLElement | null = null;

async function openMemory(tenant: string, id: string, changed: () => void): Promise<void> {
  if (!detail) return;
  const target = detail;
  try {
    const { memory } = await get(tenantPath(tenant, `/memories/${encodeURIComponent(id)}`));
    const metadata = Object.entries((memory.metadata ?? {}) as Record<string, string>);
    const triples = (memory.triples ?? []) as Json[];
    const confirm = el("div", {});
    const forget = button("Forget…", () => {
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
            button(
              "Forget it",
              () =>
                void (async () => {
                  try {
                    await post(tenantPath(tenant, `/memories/${encodeURIComponent(id)}:forget`), { requestId: requestId() });
                    replace(target, el("p", { class: "notice", role: "status", id: "forgotten" }, `Memory #${id} is forgotten.`));
                    changed();
                  } catch (error) {
                    replace(confirm, errorBox(error));
                  }
                })(),
              { class: "danger", id: "confirm-forget" },
            ),
            keep,
          ),
        ),
      );
      keep.focus();
    }, { class: "danger", id: "forget" });
    replace(
      target,
      el("h2", { tabindex: "-1", id: "memory-heading" }, `Memory #${id}`),
      memoryCard(tenant, memory, changed),
      el(
        "dl",
        { class: "facts" },
        ...metadata.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
        ...triples.flatMap((t) => [el("dt", {}, "triple"), el("dd", {}, `${t.subject} · ${t.predicate} · ${t.object}`)]),
      ),
      memory.forgotten ? null : el("div", { class: "row" }, forget),
      confirm,
    );
    (target.querySelector("#memory-heading") as HTMLElement).focus();
  } catch (error) {
    replace(target, errorBox(error));
  }
}

async function memoriesView(tenant: string): Promise<void> {
  const query = el("input", { type: "search", id: "search-query", "aria-label": "Search memories", placeholder: "search memories" }) as HTMLInputElement;
  const searchForm = el("form", { class: "row", role: "search" }, query, el("button", { type: "submit", class: "primary" }, "Search"));
  const results = el("div", { id: "search-results", "aria-live": "polite" });
  const listing = el("div", { id: "memory-list" });
  detail = el("section", { id: "memory-detail", "aria-label": "The memory opened" });
  let lastQuery = "";
  const search = async (): Promise<void> => {
    lastQuery = query.value.trim();
    if (!lastQuery) {
      replace(results);
      return;
    }
    try {
      const answer = await post(tenantPath(tenant, "/memories:recall"), { query: lastQuery, k: 10 });
      const hits = (answer.hits ?? []) as Json[];
      replace(
        results,
        el("h2", {}, `Search: ${hits.length} found`),
        ...hits.map((hit) =>
          memoryCard(tenant, hit.memory, refresh, el("span", { class: "score", title: `vector ${Number(hit.vectorScore ?? 0).toFixed(3)}, text ${Number(hit.textScore ?? 0).toFixed(3)}` }, `score ${Number(hit.score ?? 0).toFixed(3)}`)),
        ),
      );
    } catch (error) {
      replace(results, errorBox(error));
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
        ...memories.map((memory) => memoryCard(tenant, memory, refresh)),
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
  replace(main, el("h1", {}, "Memories"), searchForm, results, detail, listing);
  query.focus();
  await list();
}

// -- events ---------------------------------------------------------------------------------------

const STATUSES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED"];

function eventsView(tenant: string): void {
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
      el("td", {}, when(event.acceptedAt)),
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

async function hotPathView(tenant: string): Promise<void> {
  const status = el("div", { id: "hot-path-status" });
  const result = el("div", { id: "hot-path-result", "aria-live": "polite" });
  const act = (label: string, rest: string, body: Json, describe: (answer: Json) => string) =>
    button(label, () =>
      void (async () => {
        replace(result, `${label}…`);
        try {
          const answer = await post(tenantPath(tenant, rest), body);
          replace(result, el("p", { class: "notice", role: "status" }, describe(answer)));
        } catch (error) {
          replace(result, errorBox(error));
        }
        await load();
      })(),
    );
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

// -- integrity --------------------------------------------------------------------------------------

async function integrityView(tenant: string): Promise<void> {
  const report = el("div", { id: "integrity" }, "Verifying…");
  replace(main, el("h1", {}, "Integrity"), report);
  try {
    const r = await get(tenantPath(tenant, "/integrity"));
    const hash = el("input", { id: "head-hash", readonly: true, class: "wide", value: r.headHash ?? "", "aria-label": "Head hash" }) as HTMLInputElement;
    const copied = el("span", { class: "meta", role: "status" });
    const problems = (r.problems ?? []) as Json[];
    replace(
      report,
      el("p", {}, el("span", { class: r.valid ? "valid" : "broken", id: "integrity-verdict" }, r.valid ? "valid" : `broken at ledger entry ${r.firstBrokenAt}`)),
      el(
        "dl",
        { class: "facts" },
        el("dt", {}, "entries checked"),
        el("dd", {}, String(r.checked ?? 0)),
        el("dt", {}, "first broken at"),
        el("dd", {}, String(r.firstBrokenAt ?? 0)),
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

// -- records ----------------------------------------------------------------------------------------

async function recordsView(tenant: string): Promise<void> {
  const scopes = el("div", { id: "scopes" });
  const editor = el("section", { id: "editor" });
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
    const list = (answer.scopes ?? []) as Json[];
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
    const records: Json[] = [];
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
      if (key.value.trim()) edit(tenant, scope, key.value.trim(), "", generation, target, true);
    });
    replace(
      target,
      el("h2", { tabindex: "-1", id: "scope-heading" }, `${scope} — generation ${generation}`),
      records.length ? null : el("p", {}, "No records in this scope yet."),
      el(
        "ul",
        {},
        ...records.map((r) =>
          el("li", {}, button(`Edit ${r.key}`, () => edit(tenant, scope, r.key, r.content ?? "", generation, target, false), { "data-key": r.key })),
        ),
      ),
      newForm,
    );
    (target.querySelector("#scope-heading") as HTMLElement).focus();
  } catch (error) {
    replace(target, errorBox(error));
  }
}

function edit(tenant: string, scope: string, key: string, content: string, generation: string, target: HTMLElement, fresh: boolean): void {
  const text = el("textarea", { id: "record-content", "aria-label": `Content of ${key}`, spellcheck: "false" }) as HTMLTextAreaElement;
  text.value = content;
  const outcome = el("div", { id: "save-outcome", "aria-live": "polite" });
  // mine: the content to save, or null to delete the record.
  const save = async (expected: string, mine: string | null): Promise<void> => {
    try {
      const answer = await post(tenantPath(tenant, "/records:edit"), {
        scope,
        expectedGeneration: expected,
        changes: [mine === null ? { op: "DELETE", key } : { op: "PUT", key, content: mine }],
        requestId: requestId(),
      });
      generation = String(answer.generation);
      if (mine === null) {
        await openScope(tenant, scope, target);
        target.prepend(el("p", { class: "notice", role: "status", id: "deleted" }, `Deleted ${key}: ${scope} is at generation ${generation}.`));
        return;
      }
      edit(tenant, scope, key, mine, generation, target, false);
      const done = target.querySelector("#save-outcome") as HTMLElement;
      replace(done, el("p", { class: "notice", role: "status", id: "saved" }, `Saved: ${scope} is at generation ${generation}.`));
    } catch (error) {
      if (error instanceof ApiError && error.reason === "GENERATION_MISMATCH") await conflict(mine);
      else replace(outcome, errorBox(error));
    }
  };
  const conflict = async (mine: string | null): Promise<void> => {
    let theirs = "";
    let theirGeneration = generation;
    let gone = false;
    try {
      const answer = await get(tenantPath(tenant, "/records:get"), { scope, key });
      theirs = answer.record?.content ?? "";
      theirGeneration = String(answer.generation ?? generation);
    } catch (error) {
      if (!(error instanceof ApiError && error.reason === "RECORD_NOT_FOUND")) {
        replace(outcome, errorBox(error));
        return;
      }
      gone = true;
      const listed = await get(tenantPath(tenant, "/records"), { scope, page_size: 1 });
      theirGeneration = String(listed.generation ?? generation);
    }
    const reapply = button("Re-apply mine on top", () => void save(theirGeneration, mine), { class: "primary", id: "reapply" });
    replace(
      target,
      el("h2", { tabindex: "-1", id: "conflict-heading" }, `Conflict: ${key} changed while you edited it`),
      el(
        "p",
        { class: "error", role: "alert", id: "conflict" },
        `Someone else (another tab, an agent or a consolidator) saved ${scope} since you opened it: it is now at generation ${theirGeneration}. Nothing of yours was written.`,
      ),
      el(
        "div",
        { class: "conflict" },
        el("div", {}, el("h2", {}, `Theirs (stored, generation ${theirGeneration})`), el("pre", { id: "theirs" }, gone ? "(deleted)" : theirs)),
        el("div", {}, el("h2", {}, "Yours (not saved)"), el("pre", { id: "yours" }, mine === null ? "(delete this record)" : mine)),
      ),
      el(
        "div",
        { class: "row" },
        button("Reload theirs (drop mine)", () => edit(tenant, scope, key, gone ? "" : theirs, theirGeneration, target, gone), { id: "reload" }),
        reapply,
      ),
    );
    reapply.focus();
  };
  replace(
    target,
    el("h2", {}, `${scope} / ${key}${fresh ? " (new)" : ""}`),
    el("p", { class: "meta" }, `Opened at generation ${generation}. Saving never overwrites a newer version.`),
    text,
    el(
      "div",
      { class: "row" },
      button("Save", () => void save(generation, text.value), { class: "primary", id: "save" }),
      fresh
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
                  el("p", {}, `Delete ${key} from ${scope}?`),
                  el("div", { class: "row" }, button("Delete it", () => void save(generation, null), { class: "danger", id: "confirm-delete" }), keep),
                ),
              );
              keep.focus();
            },
            { class: "danger", id: "delete" },
          ),
      button("Back to the scope", () => void openScope(tenant, scope, target)),
    ),
    outcome,
  );
  text.focus();
}

void render();
