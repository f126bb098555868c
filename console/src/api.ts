// The HTTP/JSON API of the page's own origin (docs/http-api.md), the token kept in this tab's
// sessionStorage only (never in a URL), and what a person can do about each refusal.

export type Json = { [key: string]: any };
export type Query = Record<string, string | number | boolean | undefined>;

export const TOKEN_KEY = "mnemosyne-console-token";

export class ApiError extends Error {
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

export let token = sessionStorage.getItem(TOKEN_KEY) ?? "";

export function headers(extra: Record<string, string> = {}): Headers {
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

export async function failure(response: Response): Promise<ApiError> {
  let body: Json = {};
  try {
    body = await response.json();
  } catch {
    return new ApiError(response.status, 0, "", `the server answered ${response.status} without an explanation`, {});
  }
  const info = (body.details ?? []).find((d: Json) => String(d["@type"] ?? "").endsWith("google.rpc.ErrorInfo"));
  return new ApiError(response.status, body.code ?? 0, info?.reason ?? "", body.message ?? "", info?.metadata ?? {});
}

// The sizes the console asks for (a search's k, a page's size) and the refusal of one over the
// server's cap (--max-k, --max-page-size), whose ErrorInfo names the cap ("limit"). The console
// asks for its own size until a server refuses it, then for at most the cap it named.
const SIZES: Record<string, string> = { K_OUT_OF_RANGE: "k", PAGE_SIZE_OUT_OF_RANGE: "page_size" };
const caps: Record<string, number> = {};

function withinCaps<T extends Json>(fields: T): T {
  const asked: Json = { ...fields };
  for (const name of Object.values(SIZES)) {
    if (typeof asked[name] === "number" && caps[name] !== undefined) asked[name] = Math.min(asked[name], caps[name]);
  }
  return asked as T;
}

// Whether ``error`` refused a size of ``fields`` over a cap it names (then kept: ask again).
function learntCap(error: unknown, fields: Json): boolean {
  if (!(error instanceof ApiError)) return false;
  const name = SIZES[error.reason];
  const limit = Number(error.metadata.limit);
  if (!name || !Number.isInteger(limit) || limit < 1 || !(limit < fields[name])) return false;
  caps[name] = Math.min(caps[name] ?? limit, limit);
  return true;
}

// How long the page waits for an answer (its head and its body) before it says that none came: a
// server that stopped answering (frozen, overloaded, a proxy holding the connection) would
// otherwise leave a view at "Loading…" or a search empty for ever.
export const ANSWER_SECONDS = 30;

/** No answer came within ANSWER_SECONDS; the request was abandoned (a change may still be made). */
export class NoAnswer extends Error {}

async function answered(input: string, init: RequestInit): Promise<Json> {
  const gaveUp = new AbortController();
  const timer = setTimeout(() => gaveUp.abort(), ANSWER_SECONDS * 1000);
  try {
    const response = await fetch(input, { ...init, signal: gaveUp.signal });
    if (!response.ok) throw await failure(response);
    return await response.json();
  } catch (error) {
    if (gaveUp.signal.aborted) throw new NoAnswer(input);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

export async function get(path: string, query: Query = {}): Promise<Json> {
  const asked = withinCaps(query);
  try {
    return await answered(url(path, asked), { headers: headers(), cache: "no-store", credentials: "omit" });
  } catch (error) {
    if (learntCap(error, asked)) return get(path, query);
    throw error;
  }
}

export async function post(path: string, body: Json = {}): Promise<Json> {
  const asked = withinCaps(body);
  try {
    return await answered(path, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(asked),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (error) {
    if (learntCap(error, asked)) return post(path, body);
    throw error;
  }
}

export function tenantPath(tenant: string, rest: string): string {
  return `/v1/tenants/${encodeURIComponent(tenant)}${rest}`;
}

export function requestId(): string {
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
  REVISION_NOT_FOUND: "That revision is gone (pruned by retention, or the record was deleted since). Read the history again.",
  MEMORY_DUPLICATE: "Another memory holds that text now: forget or update that one first.",
  MEMORY_MERGED: "This memory was merged into another as a near duplicate: revert or update that one.",
  QUEUE_FULL: "The server is busy with this tenant. Try again in a few seconds.",
  SHUTTING_DOWN: "The server is shutting down. Try again when it is back.",
  HOT_PATH_DISABLED: "The hot path is off for this tenant. Enable it first.",
  HOST_FORBIDDEN: "The server refuses this address. Open the console through an address the operator allowed.",
  ORIGIN_FORBIDDEN: "The server refuses requests from this page's origin.",
  QUERY_INVALID: "The search text is empty or too long.",
};

export function explain(error: unknown): string {
  if (error instanceof ApiError) {
    const advice = ADVICE[error.reason];
    const said = error.detail ? ` (the server said: ${error.detail})` : "";
    if (advice) return `${advice}${said} [${error.reason}]`;
    if (error.reason) return `${error.detail || "The server refused."} [${error.reason}]`;
    return error.detail || `The server answered ${error.httpStatus}.`;
  }
  if (error instanceof NoAnswer)
    return `The server did not answer within ${ANSWER_SECONDS} seconds: it may be overloaded or stopped. Try again; a change you sent may have been made meanwhile (reload to see).`;
  if (error instanceof TypeError) return "The server could not be reached. Is it running, and is this its address?";
  return String(error);
}

/** Use ``value`` as the token; ``keep``: and keep it in this tab (after the server accepted it). */
export function setToken(value: string, keep: boolean): void {
  token = value;
  if (value && keep) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}
