// src/api.ts
var TOKEN_KEY = "mnemosyne-console-token";
var ApiError = class extends Error {
  constructor(httpStatus, code, reason, detail, metadata) {
    super(detail);
    this.httpStatus = httpStatus;
    this.code = code;
    this.reason = reason;
    this.detail = detail;
    this.metadata = metadata;
  }
  httpStatus;
  code;
  reason;
  detail;
  metadata;
};
var token = sessionStorage.getItem(TOKEN_KEY) ?? "";
function headers(extra = {}) {
  const h = new Headers(extra);
  if (token) h.set("Authorization", `Bearer ${token}`);
  return h;
}
function url(path, query = {}) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== void 0 && value !== "") params.append(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}
async function failure(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    return new ApiError(response.status, 0, "", `the server answered ${response.status} without an explanation`, {});
  }
  const info = (body.details ?? []).find((d) => String(d["@type"] ?? "").endsWith("google.rpc.ErrorInfo"));
  return new ApiError(response.status, body.code ?? 0, info?.reason ?? "", body.message ?? "", info?.metadata ?? {});
}
async function get(path, query = {}) {
  const response = await fetch(url(path, query), { headers: headers(), cache: "no-store", credentials: "omit" });
  if (!response.ok) throw await failure(response);
  return response.json();
}
async function post(path, body = {}) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
    cache: "no-store",
    credentials: "omit"
  });
  if (!response.ok) throw await failure(response);
  return response.json();
}
function tenantPath(tenant, rest) {
  return `/v1/tenants/${encodeURIComponent(tenant)}${rest}`;
}
function requestId() {
  return `console-${crypto.randomUUID()}`;
}
var ADVICE = {
  TOKEN_MISSING: "This server needs a token. Sign in with one.",
  TOKEN_UNKNOWN: "The server does not know this token. Check it for typos, or ask the operator whether it was replaced.",
  TOKEN_MALFORMED: "That is not a token: it has characters a token never has. Paste it again, without spaces.",
  TENANT_FORBIDDEN: "Your token may not open this tenant. Sign in with a token that names it.",
  ADMIN_REQUIRED: "Only an admin token may do this (list every tenant). Sign in with one, or open one of your tenants.",
  TENANT_INVALID: "That is not a tenant name: 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or a digit.",
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
  QUERY_INVALID: "The search text is empty or too long."
};
function explain(error) {
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
function setToken(value, keep) {
  token = value;
  if (value && keep) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// src/dom.ts
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === "function") node.addEventListener(key.replace(/^on/, ""), value);
    else if (value === true) node.setAttribute(key, "");
    else if (value !== false) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === void 0 || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
function button(label, onClick, attrs = {}) {
  return el("button", { type: "button", ...attrs, onclick: () => onClick() }, label);
}
function errorBox(error, id = "") {
  return el("p", { class: "error", role: "alert", ...id ? { id } : {} }, explain(error));
}
function replace(target, ...children) {
  target.replaceChildren(...children.filter((c) => c !== null && c !== void 0 && c !== false).map((c) => c instanceof Node ? c : document.createTextNode(String(c))));
}
function when(stamp) {
  return stamp ? new Date(stamp).toLocaleString() : "";
}
function timeEl(stamp) {
  return el("time", stamp ? { datetime: stamp } : {}, when(stamp));
}

// src/memories.ts
var MEMORY_PAGE = 20;
var SEARCH_K = 50;
var RELEVANCE_FLOOR = 0.5;
var UNMARKED = /* @__PURE__ */ new Set(["a", "an", "and", "are", "at", "do", "does", "for", "in", "is", "it", "of", "on", "or", "the", "to", "was", "what", "when", "where", "who", "with"]);
function emptyFilters() {
  return { scope: "", metadata: {}, speaker: "", thread: "", from: "", to: "" };
}
function markPattern(query) {
  const words = [...new Set((query.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []).filter((w) => w.length > 1 && !UNMARKED.has(w)))];
  if (!words.length) return null;
  const escaped = words.sort((a, b) => b.length - a.length).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(`(?<![\\p{L}\\p{N}])(?:${escaped.join("|")})[\\p{L}\\p{N}]*`, "giu");
}
function markedText(text, pattern) {
  if (!pattern) return [text];
  const parts = [];
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    const start = match.index ?? 0;
    parts.push(text.slice(at, start), el("mark", {}, match[0]));
    at = start + match[0].length;
  }
  parts.push(text.slice(at));
  return parts;
}
function happened(memory) {
  return memory.occurredAt ?? memory.createdAt ?? "";
}
function passes(memory, f) {
  if (f.speaker && memory.speaker !== f.speaker) return false;
  if (f.thread && memory.thread?.id !== f.thread) return false;
  const day = happened(memory).slice(0, 10);
  if (f.from && day < f.from) return false;
  if (f.to && day > f.to) return false;
  return true;
}
function memoryCard(c, memory, extra = null) {
  const id = String(memory.id);
  const facts = memory.facts ?? [];
  const metadata = Object.entries(memory.metadata ?? {});
  const chip = (label, change, name) => c.narrow ? button(label, () => c.narrow?.(change), { class: "chip", "aria-label": `Only ${name}`, "data-filter": Object.keys(change)[0] }) : el("span", { class: "chip" }, label);
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
      memory.forgotten ? el("span", { class: "broken" }, "forgotten") : null
    ),
    el("p", { class: "text" }, ...markedText(memory.text ?? "", c.pattern ?? null)),
    metadata.length || facts.length ? el(
      "div",
      { class: "meta" },
      ...metadata.map(([k, v]) => chip(`${k}=${v}`, { metadata: { [k]: v } }, `metadata ${k}=${v}`)),
      ...facts.map((f) => el("span", { class: "fact" }, `${f.kind}: ${f.value}`))
    ) : null
  );
}
async function openMemory(c, target, id, changed) {
  try {
    const { memory } = await get(tenantPath(c.tenant, `/memories/${encodeURIComponent(id)}`));
    const metadata = Object.entries(memory.metadata ?? {});
    const triples = memory.triples ?? [];
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
              button(
                "Forget it",
                () => void (async () => {
                  try {
                    await post(tenantPath(c.tenant, `/memories/${encodeURIComponent(id)}:forget`), { requestId: requestId() });
                    replace(target, el("p", { class: "notice", role: "status", id: "forgotten" }, `Memory #${id} is forgotten.`));
                    changed();
                  } catch (error) {
                    replace(confirm, errorBox(error));
                  }
                })(),
                { class: "danger", id: "confirm-forget" }
              ),
              keep
            )
          )
        );
        keep.focus();
      },
      { class: "danger", id: "forget" }
    );
    const showThread = async () => {
      try {
        const answer = await get(tenantPath(c.tenant, "/memories"), { thread: memory.thread.id, page_size: 50 });
        replace(
          thread,
          el("h3", {}, `Thread ${memory.thread.id}, in order`),
          el("ol", { class: "thread" }, ...(answer.memories ?? []).map((m) => el("li", { "data-memory-id": String(m.id), class: String(m.id) === id ? "current" : "" }, m.speaker ? `${m.speaker}: ` : "", m.text ?? "")))
        );
      } catch (error) {
        replace(thread, errorBox(error));
      }
    };
    replace(
      target,
      el("h2", { tabindex: "-1", id: "memory-heading" }, `Memory #${id}`),
      memoryCard({ ...c, narrow: void 0, pattern: null }, memory),
      el(
        "dl",
        { class: "facts" },
        ...metadata.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
        ...triples.flatMap((t) => [el("dt", {}, "triple"), el("dd", {}, `${t.subject} · ${t.predicate} · ${t.object}`)])
      ),
      el(
        "div",
        { class: "row" },
        memory.thread?.id ? button("Show the thread", () => void showThread(), { id: "show-thread" }) : null,
        memory.forgotten ? null : forget
      ),
      confirm,
      thread
    );
    target.querySelector("#memory-heading").focus();
  } catch (error) {
    replace(target, errorBox(error));
  }
}
function filterForm(filters, apply) {
  const field = (name, label, attrs = {}) => {
    const value = name === "metadata" ? Object.entries(filters.metadata).map(([k, v]) => `${k}=${v}`).join(", ") : filters[name];
    const input = el("input", { id: `filter-${name}`, name, value: String(value), ...attrs });
    input.addEventListener("change", () => {
      if (name === "metadata") {
        filters.metadata = {};
        for (const pair of input.value.split(",")) {
          const at = pair.indexOf("=");
          if (at > 0) filters.metadata[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
        }
      } else filters[name] = input.value.trim();
      apply();
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
      apply();
    }, { id: "clear-filters" })
  );
}
async function memoriesView(tenant, main2) {
  const query = el("input", { type: "search", id: "search-query", "aria-label": "Search memories", placeholder: "search memories" });
  const searchForm = el("form", { class: "row", role: "search" }, query, el("button", { type: "submit", class: "primary" }, "Search"));
  const filters = emptyFilters();
  const filterBox = el("div", {});
  const results = el("div", { id: "search-results", "aria-live": "polite" });
  const listing = el("div", { id: "memory-list" });
  const detail = el("section", { id: "memory-detail", "aria-label": "The memory opened" }, el("p", { class: "meta" }, "Open a memory (its number) to see it here."));
  let lastQuery = "";
  const card = {
    tenant,
    open: (id) => {
      for (const old of main2.querySelectorAll(".memory.opened")) old.classList.remove("opened");
      for (const opened of main2.querySelectorAll(`.memory[data-memory-id="${CSS.escape(id)}"]`)) opened.classList.add("opened");
      void openMemory(card, detail, id, () => refresh());
    }
  };
  const drawFilters = () => replace(filterBox, filterForm(filters, () => void search()));
  const search = async () => {
    lastQuery = query.value.trim();
    drawFilters();
    if (!lastQuery) {
      replace(results);
      return;
    }
    try {
      const answer = await post(tenantPath(tenant, "/memories:recall"), {
        query: lastQuery,
        k: SEARCH_K,
        scopes: filters.scope ? [filters.scope] : [],
        metadataEquals: filters.metadata
      });
      const hits = (answer.hits ?? []).filter((hit) => passes(hit.memory, filters));
      const best = Number(hits[0]?.score ?? 0);
      const strong = hits.filter((hit) => Number(hit.score ?? 0) >= best * RELEVANCE_FLOOR);
      const weak = hits.slice(strong.length);
      const shown = {
        ...card,
        pattern: markPattern(lastQuery),
        narrow: (change) => {
          Object.assign(filters, change, change.metadata ? { metadata: { ...filters.metadata, ...change.metadata } } : {});
          void search();
        }
      };
      const draw = (hit) => memoryCard(
        shown,
        hit.memory,
        el("span", { class: "score", title: `vector ${Number(hit.vectorScore ?? 0).toFixed(3)}, text ${Number(hit.textScore ?? 0).toFixed(3)}` }, `score ${Number(hit.score ?? 0).toFixed(3)}`)
      );
      const weaker = el("div", { id: "weaker-matches" });
      if (weak.length) {
        const unfold = button(`${weak.length} weaker match${weak.length === 1 ? "" : "es"}`, () => {
          replace(weaker, ...weak.map(draw));
          weaker.querySelector("button")?.focus();
        }, { id: "show-weaker", class: "link" });
        replace(weaker, unfold);
      }
      replace(
        results,
        el("h2", {}, `Search: ${strong.length} found${weak.length ? `, and ${weak.length} weaker` : ""}`),
        hits.length ? null : el("p", {}, "Nothing found. Try other words, or clear the filters."),
        ...strong.map(draw),
        weaker
      );
    } catch (error) {
      replace(results, errorBox(error));
    }
  };
  const refresh = () => {
    void list();
    if (lastQuery) void search();
  };
  searchForm.addEventListener("submit", (event) => {
    event.preventDefault();
    void search();
  });
  const tokens = [""];
  const list = async (index = 0) => {
    try {
      const answer = await get(tenantPath(tenant, "/memories"), {
        page_size: MEMORY_PAGE,
        page_token: tokens[index],
        newest_first: true
      });
      const memories = answer.memories ?? [];
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
          answer.nextPageToken ? button("Older", () => void list(index + 1), { id: "older-memories" }) : null
        )
      );
    } catch (error) {
      replace(listing, errorBox(error));
    }
  };
  drawFilters();
  replace(
    main2,
    el("h1", {}, "Memories"),
    searchForm,
    filterBox,
    el("div", { class: "beside" }, el("div", { class: "cards" }, results, listing), detail)
  );
  query.focus();
  await list();
}

// node_modules/diff/libesm/diff/base.js
var Diff = class {
  diff(oldStr, newStr, options = {}) {
    let callback;
    if (typeof options === "function") {
      callback = options;
      options = {};
    } else if ("callback" in options) {
      callback = options.callback;
    }
    const oldString = this.castInput(oldStr, options);
    const newString = this.castInput(newStr, options);
    const oldTokens = this.removeEmpty(this.tokenize(oldString, options));
    const newTokens = this.removeEmpty(this.tokenize(newString, options));
    return this.diffWithOptionsObj(oldTokens, newTokens, options, callback);
  }
  diffWithOptionsObj(oldTokens, newTokens, options, callback) {
    var _a;
    const done = (value) => {
      value = this.postProcess(value, options);
      if (callback) {
        setTimeout(function() {
          callback(value);
        }, 0);
        return void 0;
      } else {
        return value;
      }
    };
    const newLen = newTokens.length, oldLen = oldTokens.length;
    let editLength = 1;
    let maxEditLength = newLen + oldLen;
    if (options.maxEditLength != null) {
      maxEditLength = Math.min(maxEditLength, options.maxEditLength);
    }
    const maxExecutionTime = (_a = options.timeout) !== null && _a !== void 0 ? _a : Infinity;
    const abortAfterTimestamp = Date.now() + maxExecutionTime;
    const bestPath = [{ oldPos: -1, lastComponent: void 0 }];
    let newPos = this.extractCommon(bestPath[0], newTokens, oldTokens, 0, options);
    if (bestPath[0].oldPos + 1 >= oldLen && newPos + 1 >= newLen) {
      return done(this.buildValues(bestPath[0].lastComponent, newTokens, oldTokens));
    }
    let minDiagonalToConsider = -Infinity, maxDiagonalToConsider = Infinity;
    const execEditLength = () => {
      for (let diagonalPath = Math.max(minDiagonalToConsider, -editLength); diagonalPath <= Math.min(maxDiagonalToConsider, editLength); diagonalPath += 2) {
        let basePath;
        const removePath = bestPath[diagonalPath - 1], addPath = bestPath[diagonalPath + 1];
        if (removePath) {
          bestPath[diagonalPath - 1] = void 0;
        }
        let canAdd = false;
        if (addPath) {
          const addPathNewPos = addPath.oldPos - diagonalPath;
          canAdd = addPath && 0 <= addPathNewPos && addPathNewPos < newLen;
        }
        const canRemove = removePath && removePath.oldPos + 1 < oldLen;
        if (!canAdd && !canRemove) {
          bestPath[diagonalPath] = void 0;
          continue;
        }
        if (!canRemove || canAdd && removePath.oldPos < addPath.oldPos) {
          basePath = this.addToPath(addPath, true, false, 0, options);
        } else {
          basePath = this.addToPath(removePath, false, true, 1, options);
        }
        newPos = this.extractCommon(basePath, newTokens, oldTokens, diagonalPath, options);
        if (basePath.oldPos + 1 >= oldLen && newPos + 1 >= newLen) {
          return done(this.buildValues(basePath.lastComponent, newTokens, oldTokens)) || true;
        } else {
          bestPath[diagonalPath] = basePath;
          if (basePath.oldPos + 1 >= oldLen) {
            maxDiagonalToConsider = Math.min(maxDiagonalToConsider, diagonalPath - 1);
          }
          if (newPos + 1 >= newLen) {
            minDiagonalToConsider = Math.max(minDiagonalToConsider, diagonalPath + 1);
          }
        }
      }
      editLength++;
    };
    if (callback) {
      (function exec() {
        setTimeout(function() {
          if (editLength > maxEditLength || Date.now() > abortAfterTimestamp) {
            return callback(void 0);
          }
          if (!execEditLength()) {
            exec();
          }
        }, 0);
      })();
    } else {
      while (editLength <= maxEditLength && Date.now() <= abortAfterTimestamp) {
        const ret = execEditLength();
        if (ret) {
          return ret;
        }
      }
    }
  }
  addToPath(path, added, removed, oldPosInc, options) {
    const last = path.lastComponent;
    if (last && !options.oneChangePerToken && last.added === added && last.removed === removed) {
      return {
        oldPos: path.oldPos + oldPosInc,
        lastComponent: { count: last.count + 1, added, removed, previousComponent: last.previousComponent }
      };
    } else {
      return {
        oldPos: path.oldPos + oldPosInc,
        lastComponent: { count: 1, added, removed, previousComponent: last }
      };
    }
  }
  extractCommon(basePath, newTokens, oldTokens, diagonalPath, options) {
    const newLen = newTokens.length, oldLen = oldTokens.length;
    let oldPos = basePath.oldPos, newPos = oldPos - diagonalPath, commonCount = 0;
    while (newPos + 1 < newLen && oldPos + 1 < oldLen && this.equals(oldTokens[oldPos + 1], newTokens[newPos + 1], options)) {
      newPos++;
      oldPos++;
      commonCount++;
      if (options.oneChangePerToken) {
        basePath.lastComponent = { count: 1, previousComponent: basePath.lastComponent, added: false, removed: false };
      }
    }
    if (commonCount && !options.oneChangePerToken) {
      basePath.lastComponent = { count: commonCount, previousComponent: basePath.lastComponent, added: false, removed: false };
    }
    basePath.oldPos = oldPos;
    return newPos;
  }
  equals(left, right, options) {
    if (options.comparator) {
      return options.comparator(left, right);
    } else {
      return left === right || !!options.ignoreCase && left.toLowerCase() === right.toLowerCase();
    }
  }
  removeEmpty(array) {
    const ret = [];
    for (let i = 0; i < array.length; i++) {
      if (array[i]) {
        ret.push(array[i]);
      }
    }
    return ret;
  }
  // eslint-disable-next-line @typescript-eslint/no-unused-vars
  castInput(value, options) {
    return value;
  }
  // eslint-disable-next-line @typescript-eslint/no-unused-vars
  tokenize(value, options) {
    return Array.from(value);
  }
  join(chars) {
    return chars.join("");
  }
  postProcess(changeObjects, options) {
    return changeObjects;
  }
  get useLongestToken() {
    return false;
  }
  buildValues(lastComponent, newTokens, oldTokens) {
    const components = [];
    let nextComponent;
    while (lastComponent) {
      components.push(lastComponent);
      nextComponent = lastComponent.previousComponent;
      delete lastComponent.previousComponent;
      lastComponent = nextComponent;
    }
    components.reverse();
    const componentLen = components.length;
    let componentPos = 0, newPos = 0, oldPos = 0;
    for (; componentPos < componentLen; componentPos++) {
      const component = components[componentPos];
      if (!component.removed) {
        if (!component.added && this.useLongestToken) {
          let value = newTokens.slice(newPos, newPos + component.count);
          value = value.map(function(value2, i) {
            const oldValue = oldTokens[oldPos + i];
            return oldValue.length > value2.length ? oldValue : value2;
          });
          component.value = this.join(value);
        } else {
          component.value = this.join(newTokens.slice(newPos, newPos + component.count));
        }
        newPos += component.count;
        if (!component.added) {
          oldPos += component.count;
        }
      } else {
        component.value = this.join(oldTokens.slice(oldPos, oldPos + component.count));
        oldPos += component.count;
      }
    }
    return components;
  }
};

// node_modules/diff/libesm/diff/array.js
var ArrayDiff = class extends Diff {
  tokenize(value) {
    return value.slice();
  }
  join(value) {
    return value;
  }
  removeEmpty(value) {
    return value;
  }
};
var arrayDiff = new ArrayDiff();
function diffArrays(oldArr, newArr, options) {
  return arrayDiff.diff(oldArr, newArr, options);
}

// src/merge.ts
function splitLines(text) {
  return text.split("\n");
}
function hunks(base, other, side) {
  const found = [];
  let at = 0;
  let open2 = null;
  for (const change of diffArrays(base, other)) {
    if (!change.added && !change.removed) {
      if (open2) found.push(open2);
      open2 = null;
      at += change.count ?? change.value.length;
      continue;
    }
    open2 ??= { side, start: at, end: at, lines: [] };
    if (change.removed) {
      at += change.value.length;
      open2.end = at;
    } else {
      open2.lines.push(...change.value);
    }
  }
  if (open2) found.push(open2);
  return found;
}
function applied(base, start, end, side) {
  const out = [];
  let at = start;
  for (const h of side) {
    out.push(...base.slice(at, h.start), ...h.lines);
    at = h.end;
  }
  out.push(...base.slice(at, end));
  return out;
}
function same(a, b) {
  return a.length === b.length && a.every((line, i) => line === b[i]);
}
function merge3(base, theirs2, mine) {
  const lines = splitLines(base);
  const all = [...hunks(lines, splitLines(theirs2), "theirs"), ...hunks(lines, splitLines(mine), "mine")].sort(
    (a, b) => a.start - b.start || a.end - b.end
  );
  const blocks = [];
  const agreed = (more) => {
    const last = blocks[blocks.length - 1];
    if (last?.kind === "agreed") last.lines.push(...more);
    else if (more.length) blocks.push({ kind: "agreed", lines: [...more] });
  };
  let at = 0;
  let i = 0;
  while (i < all.length) {
    const group = [all[i]];
    const starts = /* @__PURE__ */ new Set([all[i].start]);
    let end = all[i].end;
    for (i += 1; i < all.length && (all[i].start < end || starts.has(all[i].start)); i += 1) {
      group.push(all[i]);
      starts.add(all[i].start);
      end = Math.max(end, all[i].end);
    }
    const start = group[0].start;
    agreed(lines.slice(at, start));
    at = end;
    const ours = group.filter((h) => h.side === "mine");
    const theirsHunks = group.filter((h) => h.side === "theirs");
    const mineLines = applied(lines, start, end, ours);
    const theirLines = applied(lines, start, end, theirsHunks);
    if (!ours.length) agreed(theirLines);
    else if (!theirsHunks.length || same(mineLines, theirLines)) agreed(mineLines);
    else blocks.push({ kind: "overlap", base: lines.slice(start, end), theirs: theirLines, mine: mineLines });
  }
  agreed(lines.slice(at));
  return blocks;
}
function mergedText(blocks, choices) {
  const out = [];
  let n = 0;
  for (const block of blocks) {
    if (block.kind === "agreed") {
      out.push(...block.lines);
      continue;
    }
    const choice = choices[n++];
    if (!choice) return null;
    if (choice !== "mine") out.push(...block.theirs);
    if (choice !== "theirs") out.push(...block.mine);
  }
  return out.join("\n");
}

// src/records.ts
var DRAFT_PREFIX = "mnemosyne-console-draft";
function draftKey(p) {
  return JSON.stringify([DRAFT_PREFIX, p.tenant, p.scope, p.key]);
}
function keepDraft(p, edit) {
  sessionStorage.setItem(draftKey(p), JSON.stringify(edit));
}
function storedDraft(p) {
  try {
    const raw = JSON.parse(sessionStorage.getItem(draftKey(p)) ?? "null");
    if (raw && typeof raw.generation === "string" && "base" in raw && "mine" in raw) return raw;
  } catch {
  }
  return null;
}
async function recordsView(tenant, main2) {
  const scopes = el("div", { id: "scopes" });
  const editor2 = el("section", { id: "editor", "aria-label": "Records of the scope" });
  const other = el("input", { id: "open-scope", placeholder: "workspace/name", "aria-label": "Workspace scope" });
  const otherForm = el("form", { class: "row" }, other, el("button", { type: "submit" }, "Open scope"));
  otherForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = other.value.trim();
    if (name) void openScope(tenant, name.startsWith("workspace/") || name === "global" ? name : `workspace/${name}`, editor2);
  });
  replace(main2, el("h1", {}, "Records"), scopes, otherForm, editor2);
  try {
    const answer = await get(tenantPath(tenant, "/scopes"));
    const list = answer.scopes ?? [];
    replace(
      scopes,
      el(
        "div",
        { class: "row" },
        ...list.map(
          (s) => button(`${s.scope} (${s.records ?? 0})`, () => void openScope(tenant, s.scope, editor2), {
            "data-scope": s.scope,
            "aria-label": `Open ${s.scope}`
          })
        )
      )
    );
    scopes.querySelector("button")?.focus();
  } catch (error) {
    replace(scopes, errorBox(error));
  }
}
async function openScope(tenant, scope, target) {
  try {
    const records = [];
    let generation = "0";
    let pageToken = "";
    do {
      const answer = await get(tenantPath(tenant, "/records"), { scope, page_token: pageToken });
      records.push(...answer.records ?? []);
      generation = String(answer.generation ?? "0");
      pageToken = answer.nextPageToken ?? "";
    } while (pageToken);
    const key = el("input", { id: "new-record-key", placeholder: "notes.md", "aria-label": "New record key" });
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
        ...records.map(
          (r) => el(
            "li",
            {},
            button(`Edit ${r.key}`, () => open({ tenant, scope, key: r.key, target }, { generation, base: r.content ?? "", mine: r.content ?? "" }), {
              "data-key": r.key
            })
          )
        )
      ),
      newForm
    );
    target.querySelector("#scope-heading").focus();
  } catch (error) {
    replace(target, errorBox(error));
  }
}
function open(p, fresh) {
  const kept = storedDraft(p);
  if (kept && kept.mine !== kept.base) editor(p, kept, true);
  else editor(p, fresh, false);
}
async function save(p, expected, mine) {
  const answer = await post(tenantPath(p.tenant, "/records:edit"), {
    scope: p.scope,
    expectedGeneration: expected,
    changes: [mine === null ? { op: "DELETE", key: p.key } : { op: "PUT", key: p.key, content: mine }],
    requestId: requestId()
  });
  return String(answer.generation);
}
async function saved(p, mine, generation) {
  if (mine === null) {
    sessionStorage.removeItem(draftKey(p));
    await openScope(p.tenant, p.scope, p.target);
    p.target.prepend(el("p", { class: "notice", role: "status", id: "deleted" }, `Deleted ${p.key}: ${p.scope} is at generation ${generation}.`));
    return;
  }
  editor(p, { generation, base: mine, mine }, false);
  replace(
    p.target.querySelector("#save-outcome"),
    el("p", { class: "notice", role: "status", id: "saved" }, `Saved: ${p.scope} is at generation ${generation}.`)
  );
}
async function attempt(p, edit, outcome, expected = edit.generation, notice = "") {
  try {
    await saved(p, edit.mine, await save(p, expected, edit.mine));
  } catch (error) {
    if (error instanceof ApiError && error.reason === "GENERATION_MISMATCH") await conflict(p, edit, notice);
    else replace(outcome, errorBox(error));
  }
}
function editor(p, edit, restored) {
  keepDraft(p, edit);
  const text = el("textarea", { id: "record-content", "aria-label": `Content of ${p.key}`, spellcheck: "false" });
  text.value = edit.mine ?? "";
  text.addEventListener("input", () => keepDraft(p, { ...edit, mine: text.value }));
  const outcome = el("div", { id: "save-outcome", "aria-live": "polite" });
  const current = () => ({ ...edit, mine: text.value });
  replace(
    p.target,
    el("h2", {}, `${p.scope} / ${p.key}${edit.base === null ? " (new)" : ""}`),
    el("p", { class: "meta" }, `Opened at generation ${edit.generation}. Saving never overwrites a newer version.`),
    restored ? el(
      "p",
      { class: "notice", role: "status", id: "draft-restored" },
      `Your unsaved text, started from generation ${edit.generation}, is back (this tab kept it).`,
      " ",
      button("Discard it", () => void discard(p), { class: "link", id: "discard-draft" })
    ) : null,
    text,
    el(
      "div",
      { class: "row" },
      button("Save", () => void attempt(p, current(), outcome), { class: "primary", id: "save" }),
      edit.base === null ? null : button(
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
                button("Delete it", () => void attempt(p, { ...edit, mine: null }, outcome), { class: "danger", id: "confirm-delete" }),
                keep
              )
            )
          );
          keep.focus();
        },
        { class: "danger", id: "delete" }
      ),
      button("Back to the scope", () => void openScope(p.tenant, p.scope, p.target))
    ),
    outcome
  );
  text.focus();
}
async function discard(p) {
  sessionStorage.removeItem(draftKey(p));
  await openScope(p.tenant, p.scope, p.target);
}
async function theirs(p) {
  try {
    const answer = await get(tenantPath(p.tenant, "/records:get"), { scope: p.scope, key: p.key });
    return { generation: String(answer.generation ?? "0"), text: answer.record?.content ?? "" };
  } catch (error) {
    if (!(error instanceof ApiError && error.reason === "RECORD_NOT_FOUND")) throw error;
    const listed = await get(tenantPath(p.tenant, "/records"), { scope: p.scope, page_size: 1 });
    return { generation: String(listed.generation ?? "0"), text: null };
  }
}
function marked(base, text, id, label) {
  const box = el("pre", { id, class: "diff", "aria-label": label, tabindex: "0" });
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
async function conflict(p, edit, notice) {
  let now;
  try {
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
      notice || `Someone else (another tab, an agent or a consolidator) saved ${p.scope} since you opened it at generation ${edit.generation}: it is now at generation ${now.generation}. Nothing of yours was written.`
    ),
    el(
      "div",
      { class: "three-way" },
      el("div", {}, el("h3", {}, `Base (generation ${edit.generation}, where you started)`), marked(edit.base, edit.base, "base", "Base")),
      el("div", {}, el("h3", {}, `Theirs (stored, generation ${now.generation})`), marked(edit.base, now.text, "theirs", "Theirs, compared with the base")),
      el("div", {}, el("h3", {}, "Mine (not saved)"), marked(edit.base, edit.mine, "yours", "Mine, compared with the base"))
    ),
    choices,
    el(
      "div",
      { class: "row" },
      button("Reload theirs (drop mine)", () => editor(p, { generation: now.generation, base: now.text, mine: now.text ?? "" }, false), { id: "reload" }),
      overwrite
    ),
    outcome
  );
  keepDraft(p, edit);
  if (edit.mine === null || now.text === null) {
    replace(
      choices,
      el(
        "p",
        {},
        edit.mine === null ? "You deleted the record and they changed it: reload theirs, or overwrite theirs to delete it anyway." : "They deleted the record: reload (drop yours), or overwrite theirs to write yours again."
      )
    );
    overwrite.focus();
    return;
  }
  drawMerge(p, edit, { generation: now.generation, text: now.text }, choices, outcome);
}
function drawMerge(p, edit, now, target, outcome) {
  const blocks = merge3(edit.base ?? "", now.text, edit.mine ?? "");
  const overlaps = blocks.filter((b) => b.kind === "overlap");
  const picked = overlaps.map(() => void 0);
  const result = el("pre", { id: "merged", class: "diff", tabindex: "0", "aria-label": "The merge" });
  const saveMerge = button("Save the merge", () => void saveIt(), { class: "primary", id: "save-merge" });
  const editMerge = button("Edit the merge first", () => {
    const text = mergedText(blocks, picked);
    if (text !== null) editor(p, { generation: now.generation, base: now.text, mine: text }, false);
  }, { id: "edit-merge" });
  const show = () => {
    const text = mergedText(blocks, picked);
    const open2 = picked.filter((c) => !c).length;
    replace(result, text ?? `${open2} overlap${open2 === 1 ? "" : "s"} still to settle.`);
    saveMerge.disabled = editMerge.disabled = text === null;
  };
  const saveIt = async () => {
    const text = mergedText(blocks, picked);
    if (text === null) return;
    const next = { generation: now.generation, base: now.text, mine: text };
    await attempt(p, next, outcome, next.generation, `Not saved: someone saved ${p.scope} again while you merged. Your merge is "mine" now; merge it with theirs again.`);
  };
  const fieldsets = overlaps.map((block, n) => {
    if (block.kind !== "overlap") return null;
    const name = `overlap-${n}`;
    const option = (choice, label) => {
      const input = el("input", { type: "radio", name, value: choice, id: `${name}-${choice}` });
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
        el("div", {}, el("h4", {}, "Mine"), el("pre", { class: "diff" }, block.mine.join("\n") || "(removed)"))
      ),
      el("div", { class: "row", role: "radiogroup", "aria-label": `Keep in overlap ${n + 1}` }, option("theirs", "Keep theirs"), option("mine", "Keep mine"), option("both", "Keep both (theirs first)"))
    );
  });
  replace(
    target,
    el("h3", {}, "Merge"),
    el(
      "p",
      { id: "merge-summary" },
      overlaps.length ? `Their changes and yours are kept where they do not overlap. ${overlaps.length} overlap${overlaps.length === 1 ? "" : "s"}: choose what to keep in each.` : "Their changes and yours do not overlap: the merge keeps both."
    ),
    ...fieldsets,
    el("h4", {}, "The merge"),
    result,
    el("div", { class: "row" }, saveMerge, editMerge)
  );
  show();
  (target.querySelector("input[type=radio]") ?? saveMerge).focus();
}
function confirmOverwrite(p, edit, now, outcome) {
  const cancel = button("Cancel", () => replace(outcome));
  replace(
    outcome,
    el(
      "div",
      { class: "confirm", role: "alertdialog", "aria-label": "Confirm overwriting theirs" },
      el(
        "p",
        {},
        edit.mine === null ? `Delete ${p.key} although it changed at generation ${now.generation}? Their version is lost from the record.` : `Replace generation ${now.generation} of ${p.key} with yours? Their changes shown above are lost from the record.`
      ),
      el(
        "div",
        { class: "row" },
        button("Overwrite theirs", () => void attempt(p, edit, outcome, now.generation), { class: "danger", id: "confirm-overwrite" }),
        cancel
      )
    )
  );
  cancel.focus();
}

// src/console.ts
var TENANT_PAGE = 10;
var main = document.getElementById("main");
var nav = document.getElementById("nav");
var whoBox = document.getElementById("who");
var caller = null;
var leaving = null;
var VIEWS = [
  ["memories", "Memories"],
  ["events", "Events"],
  ["records", "Records"],
  ["hotpath", "Hot path"],
  ["integrity", "Integrity"]
];
function place() {
  const params = new URLSearchParams(location.search);
  const tenant = params.get("tenant") ?? "";
  return { tenant, view: params.get("view") ?? (tenant ? "memories" : "tenants") };
}
function go(view, tenant) {
  const params = new URLSearchParams();
  if (tenant) params.set("tenant", tenant);
  if (view !== (tenant ? "memories" : "tenants")) params.set("view", view);
  const search = params.toString();
  history.pushState(null, "", search ? `?${search}` : location.pathname);
  void render();
}
window.addEventListener("popstate", () => void render());
function drawHeader(tenant, view) {
  replace(
    nav,
    button("Tenants", () => go("tenants", ""), view === "tenants" ? { "aria-current": "page" } : {}),
    ...tenant ? [
      el("span", { class: "meta" }, "tenant ", el("strong", {}, tenant)),
      ...VIEWS.map(
        ([name, label]) => button(label, () => go(name, tenant), view === name ? { "aria-current": "page" } : {})
      )
    ] : []
  );
  if (!caller) {
    replace(whoBox);
    return;
  }
  replace(
    whoBox,
    caller.name ? `signed in as ${caller.name}${caller.admin ? " (admin)" : ""}` : "no tokens on this server (admin)",
    token ? button("Sign out", signOut) : null
  );
}
function signOut() {
  setToken("", false);
  caller = null;
  void render();
}
async function render() {
  leaving?.();
  leaving = null;
  const { tenant, view } = place();
  if (!caller) {
    try {
      caller = await get("/v1/whoami");
      caller = { name: caller.name ?? "", tenants: caller.tenants ?? [], admin: caller.admin ?? false };
    } catch (error) {
      drawHeader("", "");
      signIn(error instanceof ApiError && error.httpStatus === 401 && !token ? null : error);
      return;
    }
  }
  drawHeader(tenant, view);
  const views = {
    memories: memoriesView,
    events: eventsView,
    records: recordsView,
    hotpath: hotPathView,
    integrity: integrityView
  };
  const draw = tenant ? views[view] : void 0;
  await (draw ? draw(tenant, main) : tenantsView());
}
function signIn(error) {
  const input = el("input", {
    type: "password",
    id: "token",
    name: "token",
    autocomplete: "off",
    required: true,
    class: "wide"
  });
  const form = el(
    "form",
    { class: "row", id: "sign-in" },
    el("label", { for: "token" }, "Token"),
    input,
    el("button", { type: "submit", class: "primary" }, "Sign in")
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
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
    form
  );
  input.focus();
}
async function tenantsView() {
  const who = caller;
  const open2 = el("input", { id: "open-tenant", placeholder: "tenant name", "aria-label": "Tenant name" });
  const openForm = el("form", { class: "row" }, open2, el("button", { type: "submit" }, "Open tenant"));
  openForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (open2.value.trim()) go("memories", open2.value.trim());
  });
  const table = el("div", { id: "tenants" });
  replace(main, el("h1", {}, "Tenants"), openForm, table);
  if (!who.admin) {
    drawTenants(table, who.tenants, [], null);
    return;
  }
  const tokens = [""];
  const page = async (index) => {
    try {
      const answer = await get("/v1/tenants", { page_size: TENANT_PAGE, page_token: tokens[index] });
      if (answer.nextPageToken) tokens[index + 1] = answer.nextPageToken;
      const pager = el(
        "div",
        { class: "row" },
        index > 0 ? button("Previous page", () => void page(index - 1), { id: "previous-tenants" }) : null,
        el("span", { class: "meta" }, `page ${index + 1}`),
        answer.nextPageToken ? button("Next page", () => void page(index + 1), { id: "next-tenants" }) : null
      );
      drawTenants(table, answer.tenants ?? [], answer.damaged ?? [], pager);
    } catch (error) {
      replace(table, errorBox(error));
    }
  };
  await page(0);
}
function drawTenants(target, tenants, damaged, pager) {
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
        (error) => replace(memories, errorBox(error))
      );
      get(tenantPath(tenant, "/integrity")).then(
        (report) => replace(
          integrity,
          report.valid ? el("span", { class: "valid" }, "valid") : el("span", { class: "broken" }, brokenAt(report))
        ),
        (error) => replace(integrity, errorBox(error))
      );
    }
    return el(
      "tr",
      { "data-tenant": tenant },
      el("td", {}, button(tenant, () => go("memories", tenant), { class: "link" })),
      memories,
      size,
      integrity
    );
  });
  replace(
    target,
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, el("th", {}, "tenant"), el("th", {}, "memories"), el("th", {}, "files"), el("th", {}, "integrity"))),
      el("tbody", {}, ...rows)
    ),
    pager
  );
}
var STATUSES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED"];
function eventsView(tenant, main2) {
  const filter = el(
    "select",
    { id: "event-status", "aria-label": "Show events of status" },
    el("option", { value: "" }, "all statuses"),
    ...STATUSES.map((s) => el("option", { value: s }, s.toLowerCase()))
  );
  const state = el("span", { class: "meta", id: "watch-state", role: "status" }, "connecting…");
  const body = el("tbody", { id: "events" });
  const events = /* @__PURE__ */ new Map();
  const rows = /* @__PURE__ */ new Map();
  const draw = (event) => {
    const id = String(event.eventId);
    const status = String(event.status ?? "PENDING");
    const row = el(
      "tr",
      { "data-event-id": id, "data-status": status },
      el("td", {}, id),
      el("td", { class: `status-${status}` }, status.toLowerCase()),
      el("td", {}, event.kind ?? ""),
      el("td", {}, timeEl(event.acceptedAt)),
      el("td", {}, (event.createdMemoryIds ?? []).map((m) => `#${m}`).join(" ")),
      el("td", {}, status === "FAILED" ? `${event.errorReason ?? ""}: ${event.errorMessage ?? ""}` : "")
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
    main2,
    el("h1", {}, "Events"),
    el("div", { class: "row" }, filter, state),
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, ...["event", "status", "kind", "accepted", "memories", "failure"].map((h) => el("th", {}, h)))),
      body
    )
  );
  const abort = new AbortController();
  leaving = () => abort.abort();
  let lastSequence = "";
  const watch = async () => {
    while (!abort.signal.aborted) {
      try {
        const extra = lastSequence ? { "Last-Event-ID": lastSequence } : {};
        const response = await fetch(tenantPath(tenant, "/events:watch"), {
          headers: headers(extra),
          signal: abort.signal,
          cache: "no-store",
          credentials: "omit"
        });
        if (!response.ok || !response.body) throw await failure(response);
        replace(state, "live");
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (; ; ) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
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
            const parsed = JSON.parse(data);
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
      await new Promise((resolve) => setTimeout(resolve, 1e3));
    }
  };
  void watch();
  filter.focus();
}
async function hotPathView(tenant, main2) {
  const status = el("div", { id: "hot-path-status" });
  const result = el("div", { id: "hot-path-result", "aria-live": "polite" });
  const act = (label, rest, body, describe) => button(
    label,
    () => void (async () => {
      replace(result, `${label}…`);
      try {
        const answer = await post(tenantPath(tenant, rest), body);
        replace(result, el("p", { class: "notice", role: "status" }, describe(answer)));
      } catch (error) {
        replace(result, errorBox(error));
      }
      await load();
    })()
  );
  const load = async () => {
    try {
      const s = await get(tenantPath(tenant, "/hotPath"));
      const facts = [
        ["enabled", s.enabled ? "yes" : "no"],
        ["queue depth", String(s.queueDepth ?? 0)],
        ["oldest pending", `${Number(s.oldestPendingSeconds ?? 0).toFixed(1)} s`],
        ["accepted", String(s.accepted ?? 0)],
        ["succeeded", String(s.succeeded ?? 0)],
        ["failed", String(s.failed ?? 0)],
        ["duplicates", String(s.duplicates ?? 0)]
      ];
      replace(status, el("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
    } catch (error) {
      replace(status, errorBox(error));
    }
  };
  replace(
    main2,
    el("h1", {}, "Hot path"),
    status,
    el(
      "div",
      { class: "row" },
      act("Enable", "/hotPath:enable", {}, () => "The hot path is on: fast writes are accepted and processed in the background."),
      act("Disable", "/hotPath:disable", { timeoutSeconds: 30 }, () => "The hot path is off: what was pending was processed first."),
      act(
        "Flush",
        "/hotPath:flush",
        { timeoutSeconds: 30 },
        (a) => `Flushed ${a.flushed ?? 0} event(s): ${a.succeeded ?? 0} succeeded, ${a.failed ?? 0} failed${(a.failedEventIds ?? []).length ? ` (events ${a.failedEventIds.join(", ")})` : ""}.`
      )
    ),
    result
  );
  await load();
}
function brokenAt(report) {
  return report.firstBrokenAt ? `broken at ledger entry ${report.firstBrokenAt}` : "broken";
}
async function integrityView(tenant, main2) {
  const report = el("div", { id: "integrity" }, "Verifying…");
  replace(main2, el("h1", {}, "Integrity"), report);
  try {
    const r = await get(tenantPath(tenant, "/integrity"));
    const hash = el("input", { id: "head-hash", readonly: true, class: "wide", value: r.headHash ?? "", "aria-label": "Head hash" });
    const copied = el("span", { class: "meta", role: "status" });
    const problems = r.problems ?? [];
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
        el("dd", { id: "integrity-first-broken" }, r.valid ? "none: every entry checks" : r.firstBrokenAt ? `ledger entry ${r.firstBrokenAt}` : "no entry (see the problems)")
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
            () => replace(copied, "selected: press Ctrl+C")
          );
        }),
        copied
      ),
      el("p", { class: "meta" }, "Keep the head hash elsewhere: a rewrite of the whole file changes it."),
      problems.length ? el("ul", {}, ...problems.map((p) => el("li", {}, `${p.kind} at entry ${p.ledgerSeq}${p.memoryId ? ` (memory #${p.memoryId})` : ""}: ${p.detail}`))) : null
    );
  } catch (error) {
    replace(report, errorBox(error));
  }
}
void render();
