'use strict';
// MemoryClient: promise-based calls of every service (Memory, Workspace, Admin, Events, HotPath).
// Generations (WorkspaceService) travel only in gRPC metadata, as decimal strings; this client
// returns them as BigInt (they are int64 on the server, exact above 2^53). Ids (int64) are
// decimal strings, exact as well.
//
// Retries, as in the Python client: a call is repeated only when repeating it is safe (reads,
// and writes that carry a request id, which every write gets unless the caller passes ''), when
// it failed with UNAVAILABLE or with RESOURCE_EXHAUSTED whose status details carry a
// google.rpc.RetryInfo, for `retryWindowMs` (15 s by default; never past the call's deadline,
// `timeoutMs`, which its tries share) and at most `retries` times when given: a call in flight
// across a restart of the server is answered by the server back. The waits between tries and
// why: src/retry_window.js. RESOURCE_EXHAUSTED without RetryInfo (a quota) is final.
//
// Session consistency, by default (src/consistency.js): the client keeps the newest consistency
// token its writes of each tenant returned and sends it with its next reads and writes of that
// tenant, so a read waits for this client's own writes still queued. `sessionConsistency: false`
// turns it off for the client, `consistencyToken: ''` for one read; `consistencyToken: TOKEN`
// makes a read wait for that token (from another client) alone.
const crypto = require('node:crypto');
const { setTimeout: sleep } = require('node:timers/promises');
const grpc = require('@grpc/grpc-js');
const { loadServices } = require('./protos');
const { fromServiceError, MnemosyneError, TokenInvalidError } = require('./errors');
const { SessionTokens, roleOf, TOKEN_KEY, MAX_TENANTS } = require('./consistency');
const { RetryBudget, DEFAULT_RETRY_WINDOW_MS, MAX_RETRY_WINDOW_MS } = require('./retry_window');
const {
  ROUTE_KEY, NOT_OWNER, ownerOf, firstMember, memberListText, parseMembers, checkMemberAddresses, sameMembers,
} = require('./routing');
const {
  refused, shown, checkedRequest, checkedSize, checkedTimeoutMs, timestampFromDateOrSeconds, integer, unknownName, listOf, checkingArguments,
  optionsObject, wholeOption, flagOption, shapeless, RequestInvalidError,
} = require('./unsendable');

// The caller's trace context (docs/operations.md#traces): when the host uses OpenTelemetry (the
// optional peer dependency @opentelemetry/api) and a span is active where a call is made, its W3C
// traceparent goes with the call as metadata, so the server's spans join the host's trace.
let otel = null;
try {
  otel = require('@opentelemetry/api');
} catch {
  // not installed: no trace to join
}

const GLOBAL_GENERATION_KEY = 'mnemosyne-global-generation';
const WORKSPACE_GENERATION_KEY = 'mnemosyne-workspace-generation';
const DECIMAL = /^[0-9]{1,19}$/;
const TOKEN_TEXT = /^[ -~]+$/; // a bearer token is printable ASCII (what a request header carries)
const CONSISTENCY_TOKEN_FORM = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/; // base64url.base64url, as the server issues
const MEMBER_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
const MAX_GENERATION = (1n << 63n) - 1n;
const DEFAULT_MAX_RETRY_DELAY_MS = 5000;
// The most retries a client takes when it bounds them by a count, as the Python client's
// MAX_RETRIES: more only keeps a caller waiting on a server that is gone.
const MAX_RETRIES = 100;
const MAX_RETRY_DELAY_MS = 3600 * 1000; // a server's retry delay is capped to this at most
// The server's default --max-request-bytes: a larger request is refused (REQUEST_TOO_LARGE) here,
// before it is sent, with the reason the server would give (the Python client's MAX_REQUEST_BYTES).
const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
// gRPC waits between attempts to connect to a server that is down, 1 s at first, 1.6 times longer
// each time, up to 2 minutes, and a process's clients of one address share that wait: a server
// back after a minute's restart would be left alone for minutes. The client tries every 0.1 s at
// first, at most every 0.5 s (well within the window its calls retry for, waiting at most 1 s
// between tries: src/retry_window.js), on its own connection.
const CHANNEL_OPTIONS = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 500,
  'grpc.use_local_subchannel_pool': 1,
};

function newRequestId() {
  return crypto.randomUUID().replaceAll('-', '');
}

/** The generation under `key` in `metadata`, exactly as sent; throws when absent or malformed. */
function generationFrom(metadata, key) {
  const values = metadata ? metadata.get(key) : [];
  const value = values.length === 1 ? String(values[0]) : '';
  if (!DECIMAL.test(value) || BigInt(value) > MAX_GENERATION) {
    // Fail closed: without an exact generation the host cannot know what it observed.
    throw new MnemosyneError(grpc.status.INTERNAL, 'GENERATION_METADATA_INVALID',
      `the server's response has no valid ${key} metadata (got ${JSON.stringify(values.map(String))})`);
  }
  return BigInt(value);
}

/** A generation (a BigInt, a whole number or a decimal string) as its decimal string; NUMBER_INVALID otherwise. */
function generationString(generation, field = 'generation') {
  const value = integer(generation, 'int64', field);
  if (value.startsWith('-')) throw refused('NUMBER_INVALID', `${field} is ${value}; a generation is 0 or more`);
  return value;
}

const STATUS_NAMES = { CREATED: 'created', DUPLICATE: 'duplicate', ENQUEUED: 'enqueued', INVALID: 'invalid' };

function retainResult(r) {
  return {
    status: STATUS_NAMES[r.status] ?? 'unspecified',
    memoryId: r.memory_id,
    eventId: r.event_id,
    errorReason: r.error_reason,
    errorMessage: r.error_message,
  };
}

// Why a NOT_OWNER refusal is thrown, not followed: the client has no list; a server stream had
// answered (its list is taken all the same).
const NO_MEMBER_LIST = 'this client has no member list to follow it by (members)';
const STREAMED = 'a stream that has sent or answered messages is not sent again; the member list the refusal carries is taken, so the next call for the tenant goes to the owner';

/** Why a second NOT_OWNER refusal is thrown: a call follows one redirect. */
function oneRedirect(sentTo, refusedBy) {
  return `it was sent to member ${sentTo} after member ${refusedBy} refused it, and a call follows one redirect: the members' lists differ (check each member's --members)`;
}

/** `err`, a NOT_OWNER refusal thrown rather than followed, its message saying the member it names and why not. */
function notFollowed(err, why) {
  err.message = `${err.message} (not sent to member ${err.metadata.owner || '(none named)'}, the owner it names: ${why})`;
  return err;
}

function memory(m) {
  return {
    id: m.id,
    scope: m.scope,
    text: m.text,
    metadata: { ...m.metadata },
    facts: m.facts.map((f) => ({ kind: f.kind, value: f.value, normalized: f.normalized })),
    triples: m.triples.map((t) => ({ subject: t.subject, predicate: t.predicate, object: t.object })),
    forgotten: m.forgotten,
    occurredAt: dateFrom(m.occurred_at),
    thread: m.thread ? { id: m.thread.id, position: m.thread.position } : null,
    speaker: m.speaker,
    expiresAt: dateFrom(m.expires_at),
  };
}

/** `expiresAt` (a Date or unix seconds) as the request's expires_at, refused as the Python client refuses it. */
function expiresAtFrom(expiresAt) {
  return timestampFromDateOrSeconds(expiresAt, 'expiresAt', 'EXPIRES_AT_INVALID');
}

/**
 * `occurredAt` (a Date or unix seconds, as the Python client's occurred_at) as the request's
 * occurred_at: REQUEST_UNDECODABLE when of another type ('yesterday', an object), OCCURRED_AT_INVALID
 * when no time or outside the years 1 to 9999, as that client refuses it.
 */
function occurredAtFrom(occurredAt) {
  return timestampFromDateOrSeconds(occurredAt, 'occurredAt', 'OCCURRED_AT_INVALID');
}

/** A RetainBatch item from a text or {text, scope, metadata, occurredAt, thread, speaker, expiresAt}. */
function retainItem(item) {
  const given = typeof item === 'string' ? { text: item } : item;
  const out = { text: given.text, scope: given.scope ?? '', metadata: given.metadata ?? {}, speaker: given.speaker ?? '' };
  if (given.occurredAt != null) out.occurred_at = occurredAtFrom(given.occurredAt);
  if (given.expiresAt != null) out.expires_at = expiresAtFrom(given.expiresAt);
  if (given.thread != null) out.thread = { id: given.thread.id ?? '', position: given.thread.position ?? 0 };
  return out;
}

/**
 * A ConversationMessage from {role, content, name?} or a [role, content] pair; REQUEST_UNDECODABLE
 * for any other shape, as the Python client's ArgumentTypeError (the texts themselves are checked
 * with the request). A role or content left out is empty, as in proto3: the server's
 * MESSAGE_ROLE_INVALID or MESSAGE_EMPTY, as over the JSON API (docs/http-api.md "One mistake, one reason").
 */
function conversationMessage(m, at) {
  const pair = Array.isArray(m) && m.length === 2;
  if (!pair && (m === null || typeof m !== 'object' || Array.isArray(m))) {
    throw shapeless(`messages[${at}]`, m, 'a {role, content, name?} object or a [role, content] pair');
  }
  const [role, content, name] = pair ? [m[0], m[1], ''] : [m.role, m.content, m.name];
  return { role: role ?? '', content: content ?? '', name: name ?? '' };
}

// Any other op (a typo, none at all) goes unspecified, which the server refuses CHANGE_OP_INVALID:
// never a DELETE the caller did not ask for.
const CHANGE_OPS = { put: 'PUT', delete: 'DELETE' };

function recordChange(c) {
  return { op: Object.hasOwn(CHANGE_OPS, c.op) ? CHANGE_OPS[c.op] : 'OP_UNSPECIFIED', key: c.key, content: c.content ?? '' };
}

const EVENT_STATUS_NAMES = { PENDING: 'pending', RUNNING: 'running', SUCCEEDED: 'succeeded', FAILED: 'failed' };
const EVENT_STATUS_BY_NAME = Object.fromEntries(Object.entries(EVENT_STATUS_NAMES).map(([proto, name]) => [name, proto]));

/**
 * A google.protobuf.Timestamp (seconds as a string) as a Date, to the nearest millisecond; null
 * when absent. The server holds times as float seconds: a time given to the millisecond comes
 * back a few nanoseconds early or late, and cut down it read one millisecond early.
 */
function dateFrom(t) {
  return t ? new Date(Number(t.seconds) * 1000 + Math.round(t.nanos / 1e6)) : null;
}

// The kinds of change a webhook subscription asks for, as docs/webhooks.md names them.
const WEBHOOK_KINDS = [
  'memory.created', 'memory.updated', 'memory.forgotten', 'memory.expired', 'record.changed',
  'fast_write.succeeded', 'fast_write.failed', 'consolidation.applied',
];
const WEBHOOK_KIND_PROTO = Object.fromEntries(WEBHOOK_KINDS.map((k) => [k, `WEBHOOK_KIND_${k.toUpperCase().replace('.', '_')}`]));
const WEBHOOK_KIND_NAME = Object.fromEntries(Object.entries(WEBHOOK_KIND_PROTO).map(([name, proto]) => [proto, name]));

function webhookKind(kind) {
  if (typeof kind !== 'string') throw shapeless('kinds item', kind, 'a text');
  const proto = Object.hasOwn(WEBHOOK_KIND_PROTO, kind) ? WEBHOOK_KIND_PROTO[kind] : null;
  if (!proto) throw unknownName('WEBHOOK_KINDS_INVALID', 'a webhook kind', WEBHOOK_KINDS, kind);
  return proto;
}

/** Seconds since the epoch (0: never) as a Date, or null. */
function dateFromSeconds(seconds) {
  return seconds ? new Date(seconds * 1000) : null;
}

function webhook(w) {
  return {
    id: BigInt(w.id),
    url: w.url,
    kinds: w.kinds.map((k) => WEBHOOK_KIND_NAME[k] ?? k),
    includeText: w.include_text,
    secrets: w.secrets.map((s) => ({ id: BigInt(s.id), hint: s.hint, createdAt: dateFromSeconds(s.created_at) })),
    createdAt: dateFromSeconds(w.created_at),
    pendingDeliveries: Number(w.pending_deliveries),
    failingSince: dateFromSeconds(w.failing_since),
    pausedAt: dateFromSeconds(w.paused_at),
    pauseReason: w.pause_reason,
  };
}

function webhookDelivery(d) {
  return {
    deliveryId: d.delivery_id,
    kind: WEBHOOK_KIND_NAME[d.kind] ?? d.kind,
    at: dateFromSeconds(d.at),
    delivered: d.delivered,
    attempts: d.attempts,
    nextAttemptAt: dateFromSeconds(d.next_attempt_at),
    lastAttemptAt: dateFromSeconds(d.last_attempt_at),
    lastStatusCode: d.last_status_code,
    lastError: d.last_error,
    deliveredAt: dateFromSeconds(d.delivered_at),
    memoryId: BigInt(d.memory_id),
    eventId: BigInt(d.event_id),
  };
}

function memoryRevision(r) {
  return {
    revision: r.revision,
    kind: String(r.kind).replace('REVISION_KIND_', '').toLowerCase(),
    at: dateFrom(r.at),
    surface: r.by?.surface ?? '',
    tokenName: r.by?.token_name ?? '',
    changed: [...r.changed],
    version: r.version,
    text: r.text,
    metadata: { ...r.metadata },
    expiresAt: dateFrom(r.expires_at),
    ledgerSeq: BigInt(r.ledger_seq),
    relatedMemoryId: BigInt(r.related_memory_id),
    revertedTo: r.reverted_to,
  };
}

function recordRevision(r) {
  return {
    generation: BigInt(r.generation),
    op: r.op,
    content: r.content,
    at: dateFrom(r.at),
    surface: r.by?.surface ?? '',
    tokenName: r.by?.token_name ?? '',
    source: r.source,
    ledgerSeq: BigInt(r.ledger_seq),
  };
}

function expiryPolicy(p) {
  return {
    defaultTtlSeconds: Number(p.default_ttl_seconds),
    updateExtends: p.update_extends,
    graceSeconds: Number(p.grace_seconds ?? 0),
  };
}

function figuresRow(r) {
  return {
    tenant: r.tenant,
    fileBytes: Number(r.file_bytes),
    writes: Number(r.writes),
    recalls: Number(r.recalls),
    failedEvents: Number(r.failed_events),
  };
}

/** An optional proto number: null when unset. */
function optionalNumber(message, field) {
  return message[field] === undefined || message[field] === null ? null : Number(message[field]);
}

function event(e) {
  return {
    eventId: e.event_id,
    status: EVENT_STATUS_NAMES[e.status] ?? 'unspecified',
    kind: e.kind,
    acceptedAt: dateFrom(e.accepted_at) ?? new Date(0),
    finishedAt: dateFrom(e.finished_at),
    createdMemoryIds: [...e.created_memory_ids],
    duplicateOfMemoryIds: [...e.duplicate_of_memory_ids],
    mergedIntoMemoryIds: [...e.merged_into_memory_ids],
    nearDuplicateOf: [...e.near_duplicate_of],
    errorReason: e.error_reason,
    errorMessage: e.error_message,
    attempts: e.attempts,
    latencyMs: e.latency_ms,
    sequence: e.sequence,
    extracted: e.extracted,
  };
}

// Counts are int64 on the wire but far below 2^53: numbers.
function hotPathStatus(s) {
  return {
    enabled: s.enabled,
    queueDepth: Number(s.queue_depth),
    oldestPendingSeconds: s.oldest_pending_seconds,
    accepted: Number(s.accepted),
    succeeded: Number(s.succeeded),
    failed: Number(s.failed),
    duplicates: Number(s.duplicates),
    writes: Number(s.writes),
    modelCalls: Number(s.model_calls),
    awaited: Number(s.awaited),
  };
}

function flushResult(r) {
  return {
    flushed: Number(r.flushed), succeeded: Number(r.succeeded), failed: Number(r.failed), failedEventIds: [...r.failed_event_ids],
  };
}

const MAX_WAIT_SECONDS = 3600; // the longest a Flush or Disable waits on the server
const HOT_PATH_METHODS = { enable: 'Enable', disable: 'Disable', status: 'Status', flush: 'Flush' };

class MemoryClient {
  /**
   * @param {string} target host:port
   * @param {{token?: string, credentials?: grpc.ChannelCredentials, timeoutMs?: number, retries?: number,
   *   maxRetryDelayMs?: number, sessionConsistency?: boolean, sessionTenants?: number,
   *   maxRequestBytes?: number}} [options] `maxRequestBytes`: the largest message sent (16 MiB, the
   *   server's default --max-request-bytes; raise it with the server's), a larger one refused
   *   REQUEST_TOO_LARGE before it is sent (a request, a stream's, each of an import's messages)
   */
  constructor(target, options = {}) {
    optionsObject(options, 'MemoryClient');
    // The numbers and flags first: a refusal leaves no channel behind.
    // null (the default): as many retries as the window holds.
    this.retries = wholeOption(options.retries, null, 0, MAX_RETRIES, 'MemoryClient: retries');
    this.retryWindowMs = wholeOption(
      options.retryWindowMs, DEFAULT_RETRY_WINDOW_MS, 0, MAX_RETRY_WINDOW_MS, 'MemoryClient: retryWindowMs',
    );
    this.maxRetryDelayMs = wholeOption(
      options.maxRetryDelayMs, DEFAULT_MAX_RETRY_DELAY_MS, 0, MAX_RETRY_DELAY_MS, 'MemoryClient: maxRetryDelayMs',
    );
    const sessionTenants = wholeOption(options.sessionTenants, MAX_TENANTS, 1, Number.MAX_SAFE_INTEGER, 'MemoryClient: sessionTenants');
    const sessionConsistency = flagOption(options.sessionConsistency, true, 'MemoryClient: sessionConsistency');
    this.maxRequestBytes = wholeOption(
      options.maxRequestBytes, MAX_REQUEST_BYTES, 1, Number.MAX_SAFE_INTEGER, 'MemoryClient: maxRequestBytes',
    );
    if (options.token != null && typeof options.token !== 'string') {
      throw shapeless('MemoryClient: token', options.token, 'a bearer token (a text)');
    }
    if (typeof target !== 'string' && !(target == null && options.members != null)) {
      throw shapeless('MemoryClient: target', target, 'HOST:PORT (a text)');
    }
    if (options.members != null && (typeof options.members !== 'object' || Array.isArray(options.members))
      && typeof options.members !== 'string') {
      throw shapeless('MemoryClient: members', options.members, 'a member list (ID=HOST:PORT,... or @FILE) or an object of member ids to addresses');
    }
    this._services = loadServices();
    this._credentials = options.credentials ?? grpc.credentials.createInsecure();
    // On a deployment of many members (`members`: 'ID=HOST:PORT,...', '@FILE' or {id: address}),
    // each call goes straight to the member owning its tenant, with x-mnemosyne-route naming it; a
    // member that refuses it NOT_OWNER sends the current member list, taken here before the call
    // is sent once more (docs/scale-out.md). `target` then serves the calls that name no tenant
    // ('': the first member, the smallest id).
    const { members } = options;
    this.members = members == null
      ? null
      : checkMemberAddresses(parseMembers(typeof members === 'string' ? memberListText(members) : members));
    if (this.members == null && typeof target === 'string' && target.trim() === '') {
      // Else grpc-js's TypeError 'Channel target must be a string' (it is one).
      throw refused('TARGET_EMPTY', "MemoryClient: target is empty; give the server's HOST:PORT, or members");
    }
    this._target = target;
    this._byAddress = new Map();
    this._addressOf = new WeakMap(); // stub -> the address its channel goes to (for errors)
    Object.assign(this, this._stubs(target || (this.members && this.members.get(firstMember(this.members.keys())))));
    if (options.token && !TOKEN_TEXT.test(options.token)) {
      // Else every call fails with grpc-js's own Error ('Metadata string value ... contains illegal characters').
      const held = JSON.stringify(options.token.replace(/[ -~]/g, '').slice(0, 1));
      throw refused('TOKEN_MALFORMED', `the token holds ${held}, `
        + 'which no request header carries: a token is printable ASCII');
    }
    this.token = options.token;
    this.timeoutMs = checkedTimeoutMs(options.timeoutMs ?? 30000);
    this._session = sessionConsistency ? new SessionTokens(sessionTenants) : null;
  }

  /**
   * The consistency token of this client's latest write of `tenant` (null: none kept, or session
   * consistency is off): give it to another client's read (`consistencyToken`) to make that read
   * wait for this client's writes.
   */
  consistencyToken(tenant) {
    return this._session ? this._session.newest(tenant) : null;
  }

  /** The stubs of every service on one channel to `address` (made once per address). */
  _stubs(address) {
    let stubs = this._byAddress.get(address);
    if (!stubs) {
      const { MemoryService, WorkspaceService, AdminService, EventsService, HotPathService, WebhookService } = this._services;
      const memory = new MemoryService(address, this._credentials, CHANNEL_OPTIONS);
      // The same channel for every service.
      const channelOverride = { channelOverride: memory.getChannel() };
      stubs = {
        memory,
        workspace: new WorkspaceService(address, this._credentials, channelOverride),
        admin: new AdminService(address, this._credentials, channelOverride),
        events: new EventsService(address, this._credentials, channelOverride),
        hotPathStub: new HotPathService(address, this._credentials, channelOverride),
        webhooks: new WebhookService(address, this._credentials, channelOverride),
      };
      for (const stub of Object.values(stubs)) this._addressOf.set(stub, address);
      this._byAddress.set(address, stubs);
    }
    return stubs;
  }

  /**
   * The stub of `stub`'s service at the owner of `tenant`, and the route metadata to send; a call
   * naming no tenant goes to `target`, or without one to the first member of the current list.
   */
  _routed(stub, tenant, member = '') {
    if (!this.members || (!tenant && this._target)) return { stub, route: {} };
    const name = ['memory', 'workspace', 'admin', 'events', 'hotPathStub', 'webhooks'].find((n) => this[n] === stub);
    if (!tenant) return { stub: this._stubs(this.members.get(firstMember(this.members.keys())))[name], route: {} };
    const owner = member || ownerOf(tenant, this.members.keys());
    return { stub: this._stubs(this.members.get(owner))[name], route: { [ROUTE_KEY]: owner } };
  }

  /**
   * Take the member list of a NOT_OWNER refusal; `again`: the member to send the call to again ('' for
   * the owner by the new list), or null with `why` not: the list unchanged, while a tenant moves
   * between members, the member the refusal names if the call went elsewhere. A list that cannot be
   * used (no member list, an address that is no server address) is as none, as the Python client
   * takes it: the server's fault, not the caller's, so the refusal is thrown as the server sent it
   * (NOT_OWNER naming the owner), the client's list kept, never a RequestInvalidError as for the
   * caller's list.
   */
  _corrected(err, sentTo) {
    if (!(err instanceof MnemosyneError) || err.reason !== NOT_OWNER) return { again: null, why: '' };
    if (!this.members) return { again: null, why: NO_MEMBER_LIST };
    if (!err.metadata.members) return { again: null, why: 'the refusal carries no member list' };
    let listed;
    try {
      listed = checkMemberAddresses(parseMembers(err.metadata.members));
    } catch (problem) {
      if (problem instanceof RequestInvalidError) {
        return { again: null, why: `the member list the refusal carries cannot be used (${problem.details})` };
      }
      throw problem;
    }
    const before = this.members;
    this.members = listed;
    if (!sameMembers(this.members, before)) return { again: '', why: '' };
    const named = err.metadata.owner;
    if (named === sentTo) {
      return { again: null, why: `it names member ${sentTo}, which refused it, and the member list is unchanged` };
    }
    if (!named || !this.members.has(named)) {
      return { again: null, why: `member ${named || '(none)'} is not in the member list the refusal carries` };
    }
    return { again: named, why: '' };
  }

  /** Closes the channels; a call after rejects with a MnemosyneError FAILED_PRECONDITION CLIENT_CLOSED. */
  close() {
    this._closed = true;
    for (const stubs of this._byAddress.values()) stubs.memory.close();
  }

  _metadata(extraMetadata = {}, tokens = []) {
    // Made for every call: so each call of a closed client is refused here (grpc-js threw its own
    // Error, 'Channel has been shut down').
    if (this._closed) {
      throw new MnemosyneError(grpc.status.FAILED_PRECONDITION, 'CLIENT_CLOSED',
        'this MemoryClient is closed (close() was called): make a new one', {}, 'mnemosyne.v1');
    }
    const metadata = new grpc.Metadata();
    if (this.token) metadata.set('authorization', `Bearer ${this.token}`);
    if (otel) {
      const carrier = {};
      otel.propagation.inject(otel.context.active(), carrier);
      for (const [key, value] of Object.entries(carrier)) metadata.set(key, value);
    }
    for (const [key, value] of Object.entries(extraMetadata)) metadata.set(key, value);
    for (const token of tokens) metadata.add(TOKEN_KEY, token);
    return metadata;
  }

  /**
   * One unary call, repeated under the rules in this file's header when `retry` (the caller says
   * repeating it is safe). Resolves {response, initialMetadata, trailingMetadata}; rejects with a
   * MnemosyneError carrying the ErrorInfo reason. A read or write of a tenant carries the
   * session's tokens (src/consistency.js) unless `consistencyToken` is given: a read then sends it
   * alone in its request ('' for none).
   */
  async _call(stub, method, request, {
    metadata = {}, retry = false, timeoutMs = this.timeoutMs, consistencyToken,
  } = {}) {
    request = this._sendable(stub, method, request); // nothing is sent for a request that cannot be one
    checkedTimeoutMs(timeoutMs);
    if (consistencyToken !== undefined && typeof consistencyToken !== 'string') {
      throw shapeless('consistencyToken', consistencyToken, "a write's consistency token, or '' for none");
    }
    if (consistencyToken && !(consistencyToken.length <= 1024
      && CONSISTENCY_TOKEN_FORM.test(consistencyToken))) {
      // No server issued it: refused as the server refuses it (service/host/token_form.py: the same
      // form and sentence), before anything is sent.
      throw new TokenInvalidError(grpc.status.INVALID_ARGUMENT, 'TOKEN_INVALID', "consistency_token is not one this "
        + "server issued for this tenant; pass the consistency_token of a write's response unchanged (or none)",
        {}, 'mnemosyne.v1');
    }
    const role = roleOf(stub, method);
    const session = role && consistencyToken === undefined ? this._session : null;
    const sent = session ? session.outgoing(role, request.tenant) : [];
    if (role === 'read' && consistencyToken) request.consistency_token = consistencyToken;
    try {
      for (const older of sent.slice(0, -1)) { // writes that overlapped: their tokens are waited for first
        await this._routedCall(this.hotPathStub, 'Flush', { tenant: request.tenant, consistency_token: older },
          { metadata: {}, retry: true, timeoutMs: Math.max(this.timeoutMs, 40000), tokens: [] });
      }
      const answer = await this._routedCall(stub, method, request, { metadata, retry, timeoutMs, tokens: sent.slice(-1) });
      if (session) session.answered(role, request.tenant, sent, answer.response);
      return answer;
    } catch (err) {
      if (session && err instanceof MnemosyneError) session.refused(request.tenant, sent, err.reason);
      throw err;
    }
  }

  /**
   * A message of `method` of `stub` as it is sent: checked against its type (`checkedRequest`)
   * and at most `maxRequestBytes` encoded (`checkedSize`), else a RequestInvalidError. Every
   * message sent goes through it: a unary call's request, a server stream's, each of a client
   * stream's (an import's chunks).
   */
  _sendable(stub, method, message) {
    const sent = checkedRequest(stub, method, message);
    checkedSize(stub, method, sent, this.maxRequestBytes);
    return sent;
  }

  async _routedCall(stub, method, request, {
    metadata, retry, timeoutMs, tokens, member = '',
  }) {
    request = checkedRequest(stub, method, request);
    checkedTimeoutMs(timeoutMs);
    if (typeof member !== 'string') throw shapeless('member', member, "a member's id");
    if (member && !MEMBER_ID.test(member)) {
      throw refused('MEMBER_ID_INVALID', `member ${shown(member, 80)} is no member's id: 1-63 `
        + "lowercase letters, digits and '-', starting with a letter or digit");
    }
    // Not gRPC's waitForReady, which holds a call until the channel connects: it would hold one to
    // a server that is gone until the call's deadline and fail DEADLINE_EXCEEDED in place of
    // UNAVAILABLE and its cause, would hold the calls not safe to repeat alike, and cannot help a
    // call whose connection broke once sent. Tries bounded by the window, each failing fast while
    // the server is down, end in the server's own error (as the Python client's).
    const budget = this._retryBudget(timeoutMs);
    let refusedBy = null; // the member whose NOT_OWNER was followed (a call follows one)
    let sendTo = member; // '': the tenant's owner by the member list
    for (;;) {
      const routed = this._routed(stub, request.tenant, sendTo);
      try {
        const leftMs = budget.leftMs();
        return await this._callOnce(routed.stub, method, request, { ...metadata, ...routed.route }, leftMs, tokens);
      } catch (err) {
        const sentTo = routed.route[ROUTE_KEY];
        const { again, why } = refusedBy !== null
          ? { again: null, why: oneRedirect(sentTo, refusedBy) }
          : this._corrected(err, sentTo);
        if (again !== null) {
          refusedBy = sentTo;
          sendTo = again;
          continue;
        }
        if (why && err instanceof MnemosyneError && err.reason === NOT_OWNER) throw notFollowed(err, why);
        const delay = retry ? budget.waitAfter(err) : null;
        if (delay === null) throw err;
        await sleep(delay);
      }
    }
  }

  /** The tries of one call of deadline `timeoutMs` (null: none) under this client's retry settings. */
  _retryBudget(timeoutMs) {
    return new RetryBudget({ windowMs: this.retryWindowMs, retries: this.retries, maxRetryDelayMs: this.maxRetryDelayMs }, timeoutMs);
  }

  _callOnce(stub, method, request, extraMetadata, timeoutMs, tokens) {
    const metadata = this._metadata(extraMetadata, tokens);
    return new Promise((resolve, reject) => {
      let initialMetadata = new grpc.Metadata();
      let response;
      let failed = false;
      let settledCallback = false;
      let trailing = null;
      const finish = () => {
        if (!failed && settledCallback && trailing) resolve({ response, initialMetadata, trailingMetadata: trailing });
      };
      const call = stub[method](request, metadata, { deadline: Date.now() + timeoutMs }, (err, value) => {
        if (err) {
          failed = true;
          reject(fromServiceError(err, this._addressOf.get(stub)));
          return;
        }
        response = value;
        settledCallback = true;
        finish();
      });
      call.on('metadata', (m) => { initialMetadata = m; });
      call.on('status', (status) => {
        trailing = status.metadata;
        finish();
      });
    });
  }

  // -- memories ---------------------------------------------------------------------------------

  /**
   * `fast` takes the hot path when the tenant's is enabled (status 'enqueued', an eventId).
   * `requestId: ''` sends none: the write is then never repeated. `occurredAt` (a Date or unix
   * seconds: when it was said or happened), `thread` ({ id, position }: its place in a conversation) and `speaker`
   * (who said or wrote it) are optional; recall uses them (docs/recall-quality.md). `expiresAt` (a
   * Date or unix seconds) is when it expires: hidden from then on, erased after the tenant's grace
   * (unset: the tenant's default time to live, docs/expiry.md).
   */
  async retain(tenant, text, {
    scope = '', metadata = {}, requestId = newRequestId(), fast = false, occurredAt = null, thread = null, speaker = '',
    expiresAt = null,
  } = {}) {
    const request = {
      tenant, ...retainItem({ text, scope, metadata, occurredAt, thread, speaker, expiresAt }), request_id: requestId ?? '', fast,
    };
    const { response } = await this._call(this.memory, 'Retain', request, { retry: Boolean(requestId) });
    return retainResult(response.result);
  }

  /**
   * A multi-turn conversation as one memory (one fingerprint): its text is the transcript, a
   * "role: content" line each ("role (name): content" with a name); the same conversation again is
   * a duplicate of the first. `messages` are {role, content, name?} objects or [role, content]
   * pairs; the options are retain's, the whole conversation's (without `speaker`, the one name
   * its messages share, if any). The server refuses MESSAGES_TOO_MANY (over 1,000), MESSAGE_EMPTY,
   * MESSAGE_ROLE_INVALID (a role is 1-64 letters, digits, spaces, '.', '_' or '-'); the client
   * refuses no messages at all (MESSAGES_EMPTY), as the Python client's retain_conversation.
   */
  async retainConversation(tenant, messages, {
    scope = '', metadata = {}, requestId = newRequestId(), fast = false, occurredAt = null, thread = null, speaker = '',
    expiresAt = null,
  } = {}) {
    const sent = listOf(messages, 'messages').map(conversationMessage);
    if (sent.length === 0) {
      // On the wire, no messages at all: the server would read a text left out.
      throw refused('MESSAGES_EMPTY', 'retainConversation: messages is empty; send at least one {role, content}');
    }
    const request = {
      tenant,
      ...retainItem({ text: '', scope, metadata, occurredAt, thread, speaker, expiresAt }),
      messages: sent,
      request_id: requestId ?? '',
      fast,
    };
    const { response } = await this._call(this.memory, 'Retain', request, { retry: Boolean(requestId) });
    return retainResult(response.result);
  }

  /**
   * The `k` memories best matching `query` (0 or none: the server's default, 5 or its --max-k when
   * lower; a number of the client's own would be refused by a server with a lower --max-k).
   * `consistencyToken`: undefined waits for this client's own writes of the tenant (session
   * consistency), '' for none, a token for the writes it names.
   */
  async recall(tenant, query, {
    k = 0, scopes = [], metadataEquals = {}, consistencyToken,
  } = {}) {
    const { response } = await this._call(this.memory, 'Recall',
      { tenant, query, k, scopes, metadata_equals: metadataEquals }, { retry: true, consistencyToken });
    return response.hits.map((h) => ({ memory: memory(h.memory), score: h.score }));
  }

  async stats(tenant) {
    const { response } = await this._call(this.admin, 'Stats', { tenant }, { retry: true });
    return response;
  }

  /**
   * Several memories in one call, each item a text or {text, scope, metadata, occurredAt, thread,
   * speaker, expiresAt}; one result per item, in order (an item that fails never loses the others).
   */
  async retainBatch(tenant, items, { requestId = newRequestId(), fast = false } = {}) {
    const request = { tenant, items: listOf(items, 'items').map(retainItem), request_id: requestId ?? '', fast };
    const { response } = await this._call(this.memory, 'RetainBatch', request, { retry: Boolean(requestId) });
    return response.results.map(retainResult);
  }

  /** One memory by id; `consistencyToken` as for recall. */
  async getMemory(tenant, memoryId, { consistencyToken } = {}) {
    const { response } = await this._call(this.memory, 'GetMemory', { tenant, memory_id: memoryId },
      { retry: true, consistencyToken });
    return memory(response.memory);
  }

  /**
   * One page of a tenant's memories, oldest first (`newestFirst`), or one thread's in order;
   * `pageSize` 0 or none: the server's default (100, or its --max-page-size when lower).
   */
  async listMemories(tenant, {
    scope = '', pageSize = 0, pageToken = '', includeForgotten = false, newestFirst = false, thread = '',
    metadataEquals = {}, consistencyToken,
  } = {}) {
    const { response } = await this._call(this.memory, 'ListMemories', {
      tenant,
      scope,
      page_size: pageSize,
      page_token: pageToken,
      include_forgotten: includeForgotten,
      newest_first: newestFirst,
      thread,
      metadata_equals: metadataEquals,
    }, { retry: true, consistencyToken });
    return { memories: response.memories.map(memory), nextPageToken: response.next_page_token };
  }

  /** Erase one memory (no byte of it left in any file); false if it was forgotten already. */
  async forget(tenant, memoryId, { requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.memory, 'ForgetMemory',
      { tenant, memory_id: memoryId, request_id: requestId ?? '' }, { retry: Boolean(requestId) });
    return response.forgotten;
  }

  /**
   * Change a memory's text and/or metadata in place (its earlier versions are kept:
   * listMemoryVersions). `metadata` replaces the memory's whole metadata (`{}` clears it; an
   * update never merges); without it the metadata is kept. `expiresAt` (a Date or unix seconds)
   * gives it a new expiry, `clearExpiresAt: true` makes it never expire (both: the server's
   * EXPIRES_AT_CONFLICT); without either the expiry is kept, or extended by the tenant's policy
   * (docs/expiry.md). Either may be given alone.
   */
  async updateMemory(tenant, memoryId, {
    text = '', metadata, replaceMetadata = metadata !== undefined, requestId = newRequestId(), expiresAt = null,
    clearExpiresAt = false,
  } = {}) {
    const request = {
      tenant,
      memory_id: memoryId,
      text,
      metadata: metadata ?? {},
      replace_metadata: replaceMetadata,
      request_id: requestId ?? '',
      clear_expires_at: clearExpiresAt,
    };
    if (expiresAt != null) request.expires_at = expiresAtFrom(expiresAt);
    const { response } = await this._call(this.memory, 'UpdateMemory', request, { retry: Boolean(requestId) });
    return {
      memory: memory(response.memory),
      updated: response.updated,
      nearDuplicateOf: [...response.near_duplicate_of],
      supersedes: [...response.supersedes],
    };
  }

  /** Forget every memory whose metadata has all of `metadataEquals` (in `scope`, when given), at once. */
  async forgetMemories(tenant, metadataEquals, { scope = '', requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.memory, 'ForgetMemories',
      { tenant, metadata_equals: metadataEquals, scope, request_id: requestId ?? '' }, { retry: Boolean(requestId) });
    return Number(response.forgotten_count);
  }

  /** Every version of a memory, oldest first, each with the time it became current. */
  async listMemoryVersions(tenant, memoryId) {
    const { response } = await this._call(this.memory, 'ListMemoryVersions', { tenant, memory_id: memoryId },
      { retry: true });
    return response.versions.map((v) => ({
      version: Number(v.version), text: v.text, metadata: { ...v.metadata }, at: dateFrom(v.at), current: v.current,
    }));
  }

  // -- administration and lifecycle --------------------------------------------------------------

  /** The audit chain's verdict on a tenant's file: valid, the first broken entry, each problem. */
  async verifyIntegrity(tenant) {
    const { response } = await this._call(this.admin, 'VerifyIntegrity', { tenant }, { retry: true });
    return {
      valid: response.valid,
      firstBrokenAt: Number(response.first_broken_at),
      checked: Number(response.checked),
      headHash: response.head_hash,
      problems: response.problems.map((p) => ({
        ledgerSeq: Number(p.ledger_seq), memoryId: p.memory_id, kind: p.kind, detail: p.detail,
      })),
    };
  }

  /** Nothing: the cheapest call (the server answers, the token is good). */
  async ping() {
    await this._call(this.admin, 'Ping', {}, { retry: true });
  }

  /** Who this client's token is: its name, its tenants, whether it is an admin. */
  async whoAmI() {
    const { response } = await this._call(this.admin, 'WhoAmI', {}, { retry: true });
    return { name: response.name, tenants: [...response.tenants], admin: response.admin };
  }

  /**
   * The near-duplicate groups of a tenant (`threshold` 0-1, 0: the server's); `merge: true` merges
   * each group into its kept memory.
   */
  async dedup(tenant, { merge = false, threshold = 0, requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.admin, 'Dedup',
      { tenant, merge, threshold, request_id: requestId ?? '' }, { retry: !merge || Boolean(requestId) });
    return {
      groups: response.groups.map((g) => ({ keepMemoryId: g.keep_memory_id, duplicateMemoryIds: [...g.duplicate_memory_ids] })),
      merged: response.merged,
      threshold: response.threshold,
    };
  }

  /**
   * One step of moving a tenant to another embedder (`'minilm'` or `'hashing'`) while it serves
   * (admin token): `chunkSize` memories embedded (0: the server's 256), or the switch. Call again
   * until `finished`; an interrupted move goes on where it stopped.
   */
  async reembedTenant(tenant, embedder, { chunkSize = 0 } = {}) {
    const { response } = await this._call(this.admin, 'ReembedTenant',
      { tenant, embedder, chunk_size: chunkSize }, { retry: true });
    return {
      embedder: response.embedder,
      done: Number(response.done),
      total: Number(response.total),
      finished: response.finished,
      switched: Number(response.switched),
    };
  }

  /** One page of the tenants with a file (admin token), in lexical order. */
  async listTenants({ pageSize = 0, pageToken = '' } = {}) {
    const { response } = await this._call(this.admin, 'ListTenants', { page_size: pageSize, page_token: pageToken },
      { retry: true });
    return {
      tenants: [...response.tenants],
      nextPageToken: response.next_page_token,
      damaged: [...response.damaged],
      unansweredMembers: [...response.unanswered_members],
    };
  }

  /**
   * Every tenant's stats (admin token), read as a stream of chunks: NOT one snapshot (each tenant
   * read in a transaction of its own while writes go on: `consistency` says so). A read: asked
   * while the server is down or restarting, it is opened again within the retry window; one that
   * failed after its first chunk throws.
   */
  async aggregateStats({ chunkSize = 0, timeoutMs } = {}) {
    const result = { tenants: {}, damaged: {}, total: null, filesRead: 0, consistency: '', unansweredMembers: [] };
    for await (const chunk of this._stream(this.admin, 'AggregateStats', { chunk_size: chunkSize }, '', timeoutMs, true)) {
      for (const row of chunk.tenants) {
        if (row.error_reason) result.damaged[row.tenant] = row.error_reason;
        else result.tenants[row.tenant] = row.stats;
      }
      if (chunk.total) {
        result.total = chunk.total;
        result.filesRead = Number(chunk.files_read);
        result.consistency = chunk.consistency;
        result.unansweredMembers = [...chunk.unanswered_members];
      }
    }
    return result;
  }

  /** A tenant's scopes (global, workspace/NAME), each with its generation and number of records. */
  async listScopes(tenant) {
    const { response } = await this._call(this.workspace, 'ListScopes', { tenant }, { retry: true });
    return response.scopes.map((s) => ({ scope: s.scope, generation: BigInt(s.generation), records: Number(s.records) }));
  }

  /** Erase a whole tenant (admin token): its files gone, a receipt kept. Not repeated. */
  async eraseTenant(tenant) {
    const { response } = await this._call(this.admin, 'EraseTenant', { tenant });
    this._session?.forget(tenant); // its writes are gone: the server would answer TIMELINE_CHANGED
    const r = response.receipt;
    return { tenant: r.tenant, erasedAt: dateFrom(r.erased_at), tokenName: r.token_name, headHash: r.head_hash };
  }

  /**
   * An online backup (admin token) as its stream of parts: {tenant} (a copy's manifest), {chunk}
   * (its files' bytes), {unchanged}, {skipped}, {summary}; `known` ([{tenant, change_counter,
   * inbox_sequence}]) leaves out what is unchanged since a previous backup. `mnemosyne backup`
   * writes them to a directory. Opened while the server is down or restarting, it is opened again
   * within the retry window; one that failed after its first part throws.
   */
  backup({ tenants = [], known = [], timeoutMs = 3600000 } = {}) {
    return this._stream(this.admin, 'Backup', { tenants, known }, '', timeoutMs, true);
  }

  /**
   * One tenant's export as its stream of parts: {manifest} first, then {chunk}s of its files.
   * Opened while the server is down or restarting, it is opened again within the retry window; one
   * that failed after its first part throws (export again).
   */
  exportTenant(tenant, { timeoutMs = 3600000 } = {}) {
    return this._stream(this.admin, 'ExportTenant', { tenant }, tenant, timeoutMs, true);
  }

  /**
   * Install an export on this server (admin token): `manifest` as exportTenant gave it, `chunks`
   * an iterable or async iterable of its chunks; under `tenant` (default: the manifest's),
   * `replace` an existing one. Resolves the installed tenant's figures.
   */
  async importTenant(manifest, chunks, { tenant = '', replace = false, timeoutMs = 3600000 } = {}) {
    if (typeof chunks === 'string' || !(Symbol.iterator in Object(chunks) || Symbol.asyncIterator in Object(chunks))) {
      // Else JS's own TypeError ('chunks is not async iterable'), or a text's characters as chunks.
      throw shapeless('importTenant: chunks', chunks, 'an iterable or async iterable of BackupChunk objects');
    }
    // Named even when it is the manifest's (its meaning then), so that it goes to that tenant's
    // owner on a deployment of many members.
    const named = tenant === '' && typeof manifest?.tenant === 'string' ? manifest.tenant : tenant;
    const first = this._sendable(this.admin, 'ImportTenant', { tenant: named, manifest, replace });
    checkedTimeoutMs(timeoutMs);
    const { stub, route } = this._routed(this.admin, first.tenant);
    return new Promise((resolve, reject) => {
      const call = stub.ImportTenant(this._metadata(route), { deadline: Date.now() + timeoutMs }, (err, r) => {
        if (err) {
          const failed = fromServiceError(err, this._addressOf.get(stub));
          this._streamRefused(failed, route[ROUTE_KEY], null, true); // the list is taken; the chunks are not kept to send again
          reject(failed);
        } else {
          this._session?.forget(r.tenant); // another copy: the tokens of the one replaced name nothing
          resolve({
            tenant: r.tenant, headHash: r.head_hash, ledgerEntries: Number(r.ledger_entries), memories: Number(r.memories), replaced: r.replaced,
          });
        }
      });
      (async () => {
        call.write(first);
        for await (const chunk of chunks) {
          const message = this._sendable(stub, 'ImportTenant', { chunk }); // a refusal cancels the import
          if (!call.write(message)) await new Promise((drained) => call.once('drain', drained));
        }
        call.end();
      })().catch((err) => {
        reject(err); // first: the CANCELLED that cancel() brings is not the caller's error
        call.cancel();
      });
    });
  }

  /**
   * Move `tenant` from `member` (its source; routed there) to `destination`, on a deployment of
   * many members (docs/scale-out.md "Moving tenants"); safe to repeat: it finishes an interrupted move.
   */
  async moveTenant(tenant, destination, { member = '', timeoutMs = 3600000 } = {}) {
    const { response } = await this._routedCall(this.admin, 'MoveTenant', { tenant, destination },
      { metadata: {}, retry: true, timeoutMs, tokens: [], member });
    return {
      tenant: response.tenant,
      source: response.source,
      destination: response.destination,
      epoch: Number(response.epoch),
      headHash: response.head_hash,
      bytes: Number(response.bytes),
      steps: [...response.steps],
      memories: Number(response.memories),
    };
  }

  /** A move's last step, asked of the destination `member`: the tenant imported at `epoch` goes live. */
  async activateTenant(tenant, epoch, headHash, { member = '' } = {}) {
    const { response } = await this._routedCall(this.admin, 'ActivateTenant',
      { tenant, epoch: epoch, head_hash: headHash }, { metadata: {}, retry: true, timeoutMs: this.timeoutMs, tokens: [], member });
    return response.activated;
  }

  /**
   * Begin (or, `complete: true`, complete) a change to the member list `to` on the member this client
   * calls (admin token; `mnemosyne rebalance` asks each member).
   */
  async changeMembers(to, { complete = false } = {}) {
    const { response } = await this._call(this.admin, 'ChangeMembers', { to, complete }, { retry: true });
    return { member: response.member, creationsWaited: response.creations_waited, previousDone: response.previous_done };
  }

  /**
   * The member to open again a server stream that `sentTo` refused with `failed` (null: not again,
   * its NOT_OWNER refusal saying why). Its member list is taken, as a unary call's is; the stream is
   * sent again, once, only before its first message: one that has answered is thrown.
   */
  _streamRefused(failed, sentTo, refusedBy, answered) {
    if (!(failed instanceof MnemosyneError) || failed.reason !== NOT_OWNER) return null;
    if (refusedBy !== null) {
      notFollowed(failed, oneRedirect(sentTo, refusedBy));
      return null;
    }
    const { again, why } = this._corrected(failed, sentTo);
    if (again !== null && !answered) return again;
    if (again !== null || why) notFollowed(failed, again !== null ? STREAMED : why);
    return null;
  }

  /**
   * A server stream's messages as an async iterable (routed to `tenant`'s owner); leaving the loop
   * cancels it. Refused NOT_OWNER before its first message, it is sent once more, to the owner the
   * refusal's member list names, as a unary call is (`_streamRefused`). `retry` (a stream safe to
   * open again): failed before its first message, it is opened again as a read is called again,
   * within the retry window from that failure; failed after, it throws, unless `resumed(last
   * message given)` is the request opening it again from there (a watch's), then opened as one
   * that had not answered.
   */
  async* _stream(stub, method, request, tenant, timeoutMs, retry = false, resumed = null) {
    let sent = this._sendable(stub, method, request);
    checkedTimeoutMs(timeoutMs);
    let sendTo = '';
    let refusedBy = null; // the member whose NOT_OWNER was followed (a stream follows one)
    let budget = new RetryBudget({ windowMs: 0, retries: 0, maxRetryDelayMs: 0 }, timeoutMs); // the deadline
    let failing = false;
    let last = null;
    for (;;) {
      if (last !== null && resumed !== null) sent = this._sendable(stub, method, resumed(last));
      const routed = this._routed(stub, tenant, sendTo);
      const leftMs = budget.leftMs();
      const call = routed.stub[method](sent, this._metadata(routed.route),
        leftMs == null ? {} : { deadline: Date.now() + leftMs });
      call.on('error', () => {}); // the status after our own cancel() is no unhandled 'error'
      let answered = false;
      try {
        for await (const message of call) {
          answered = true;
          last = message;
          yield message;
        }
        return;
      } catch (err) {
        if (err && err.code === grpc.status.CANCELLED) return;
        const failed = fromServiceError(err, this._addressOf.get(routed.stub));
        const sentTo = routed.route[ROUTE_KEY];
        const again = this._streamRefused(failed, sentTo, refusedBy, answered);
        if (again !== null) {
          refusedBy = sentTo;
          sendTo = again;
          continue;
        }
        if (!failing || answered) { // a stream that ran before it failed gets a whole window (each outage its own)
          budget = this._retryBudget(budget.leftMs());
          failing = true;
        }
        const delay = retry && (!answered || resumed !== null) ? budget.waitAfter(failed) : null;
        if (delay === null) throw failed;
        await sleep(delay);
      } finally {
        call.cancel();
      }
    }
  }

  // -- hot path and events ----------------------------------------------------------------------

  /**
   * `action` is 'enable', 'disable', 'status' or 'flush' (the Python client's hot_path). 'flush'
   * waits until every fast write accepted before it has finished and resolves a FlushResult;
   * 'disable' stops queueing and waits for the queue to drain. 'flush' with `consistencyToken` waits
   * only for the writes that token names. Both wait at most `timeoutSeconds`
   * (server default 30), then fail with DEADLINE_EXCEEDED. The others resolve the HotPathStatus.
   * Status and Flush only read, so they are repeated like reads; Enable and Disable carry no
   * request id and are not.
   */
  async hotPath(tenant, action, { timeoutSeconds = 0, consistencyToken = '' } = {}) {
    if (typeof action !== 'string') throw shapeless('action', action, 'a text');
    if (typeof timeoutSeconds !== 'number') throw shapeless('timeoutSeconds', timeoutSeconds, 'a number of seconds');
    if (!Object.hasOwn(HOT_PATH_METHODS, action)) {
      throw unknownName('HOT_PATH_ACTION_INVALID', 'action', Object.keys(HOT_PATH_METHODS), action);
    }
    // The call's own deadline must outlast the server-side wait (0, and what the server refuses,
    // TIMEOUT_INVALID: 30 s).
    const wait = timeoutSeconds > 0 && timeoutSeconds <= MAX_WAIT_SECONDS ? timeoutSeconds : 30;
    const timeoutMs = Math.max(this.timeoutMs, (wait + 10) * 1000);
    const { response } = await this._call(this.hotPathStub, HOT_PATH_METHODS[action],
      { tenant, timeout_seconds: timeoutSeconds, ...(action === 'flush' ? { consistency_token: consistencyToken } : {}) },
      { retry: action === 'status' || action === 'flush', timeoutMs });
    return action === 'flush' ? flushResult(response) : hotPathStatus(response);
  }

  async getEvent(tenant, eventId) {
    const { response } = await this._call(this.events, 'GetEvent', { tenant, event_id: eventId }, { retry: true });
    return event(response);
  }

  /**
   * One page of events in id order; `status` one of 'pending', 'running', 'succeeded', 'failed';
   * `pageSize` 0 or none: the server's default (100, or its --max-page-size when lower).
   */
  async listEvents(tenant, { status, acceptedAfter, pageSize = 0, pageToken = '' } = {}) {
    if (status != null && typeof status !== 'string') throw shapeless('status', status, 'a text');
    if (status != null && !Object.hasOwn(EVENT_STATUS_BY_NAME, status)) {
      throw unknownName('EVENT_STATUS_INVALID', 'status', Object.keys(EVENT_STATUS_BY_NAME), status);
    }
    const request = {
      tenant,
      status: status == null ? 'EVENT_STATUS_UNSPECIFIED' : EVENT_STATUS_BY_NAME[status],
      page_size: pageSize,
      page_token: pageToken,
    };
    if (acceptedAfter != null) request.accepted_after = timestampFromDateOrSeconds(acceptedAfter, 'acceptedAfter', 'TIMESTAMP_INVALID');
    const { response } = await this._call(this.events, 'ListEvents', request, { retry: true });
    return { events: response.events.map(event), nextPageToken: response.next_page_token };
  }

  /**
   * Every status transition, replayed from the durable log then live, as an async iterable:
   * `for await (const e of client.watchEvents(tenant)) ...`; leaving the loop cancels the
   * stream. To resume a dropped stream without missing a transition, pass the last received
   * event's `sequence` as `afterSequence`. It runs until `timeoutMs` (default: no deadline).
   * A stream that failed (UNAVAILABLE: the server down or restarting; a refusal for a limit with
   * a RetryInfo) is opened again as a read is called again, within the retry window from that
   * failure: after events, from the last one given (its `sequence` as `afterSequence`), so none is
   * missed and none given twice; it throws only once the window is over.
   */
  async* watchEvents(tenant, { afterEventId = 0, afterSequence = 0, timeoutMs } = {}) {
    const request = { tenant, after_event_id: afterEventId, after_sequence: afterSequence };
    // Opened again after events from the last one given: none missed, none given twice.
    const resumed = (last) => ({ ...request, after_sequence: last.sequence });
    const messages = this._stream(this.events, 'WatchEvents', request, tenant, timeoutMs, true, resumed);
    for await (const message of messages) yield event(message);
  }

  // -- workspace (host-owned generations) ---------------------------------------------------------

  /**
   * Records and recalled memories, with both generations from the response metadata; `k` and
   * `consistencyToken` as for recall.
   */
  async assembleContext(tenant, workspace, { query = '', k = 0, consistencyToken } = {}) {
    // Records the server left out to keep its response under ~3 MiB (omitted_records) are read
    // one by one and must carry the assembly's generation; if one changed meanwhile, the context
    // is assembled again (at most three times), so records and generations always belong together.
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const { response, initialMetadata } = await this._call(this.workspace, 'AssembleContext',
        { tenant, workspace, query, k }, { retry: true, consistencyToken });
      const generations = {
        global: generationFrom(initialMetadata, GLOBAL_GENERATION_KEY),
        [`workspace/${workspace}`]: generationFrom(initialMetadata, WORKSPACE_GENERATION_KEY),
      };
      const records = {
        global: response.global_records.map((r) => ({ key: r.key, content: r.content })),
        [`workspace/${workspace}`]: response.workspace_records.map((r) => ({ key: r.key, content: r.content })),
      };
      if (!(await this._completeRecords(tenant, response.omitted_records, generations, records))) continue;
      return {
        globalRecords: records.global,
        workspaceRecords: records[`workspace/${workspace}`],
        memories: response.memories.map((h) => ({ memory: memory(h.memory), score: h.score })),
        omittedMemoryIds: [...response.omitted_memory_ids],
        globalGeneration: generations.global,
        workspaceGeneration: generations[`workspace/${workspace}`],
      };
    }
    throw new MnemosyneError(grpc.status.ABORTED, 'RECORDS_CHANGED',
      'the records kept changing while their context was assembled; assemble it again');
  }

  /** Read the records an assembly left out into `records`; false if one changed since. */
  async _completeRecords(tenant, omitted, generations, records) {
    for (const o of omitted) {
      let found;
      try {
        found = await this.getRecord(tenant, o.scope, o.key);
      } catch (err) {
        if (err instanceof MnemosyneError && err.reason === 'RECORD_NOT_FOUND') return false;
        throw err;
      }
      if (found.generation !== generations[o.scope]) return false;
      records[o.scope].push(found.record);
    }
    // The server's order: SQLite's binary collation, i.e. by UTF-8 bytes.
    const byBytes = (a, b) => Buffer.compare(Buffer.from(a.key, 'utf8'), Buffer.from(b.key, 'utf8'));
    for (const scoped of Object.values(records)) scoped.sort(byBytes);
    return true;
  }

  /** One record and its scope's generation (BigInt), read together. */
  async getRecord(tenant, scope, key) {
    const { response } = await this._call(this.workspace, 'GetRecord', { tenant, scope, key }, { retry: true });
    return { record: { key: response.record.key, content: response.record.content }, generation: BigInt(response.generation) };
  }

  /**
   * Replace MEMORY.md if the Global generation is still `observedGeneration`; resolves the new
   * generation (trailing metadata). `observedGeneration` null/undefined sends no metadata (the
   * server then fails with OBSERVATION_MISSING): there is no "latest" default.
   */
  async updateGlobal(tenant, content, { observedGeneration, requestId = newRequestId() } = {}) {
    const extra = observedGeneration == null ? {} : { [GLOBAL_GENERATION_KEY]: generationString(observedGeneration, 'observedGeneration') };
    const { trailingMetadata } = await this._call(this.workspace, 'UpdateGlobal',
      { tenant, content, request_id: requestId ?? '' }, { metadata: extra, retry: Boolean(requestId) });
    return generationFrom(trailingMetadata, GLOBAL_GENERATION_KEY);
  }

  /** Apply [{op: 'put'|'delete', key, content}] to a workspace as one generation. */
  async updateWorkspace(tenant, workspace, changes, { observedGeneration, requestId = newRequestId() } = {}) {
    const extra = observedGeneration == null ? {} : { [WORKSPACE_GENERATION_KEY]: generationString(observedGeneration, 'observedGeneration') };
    const { response, trailingMetadata } = await this._call(this.workspace, 'UpdateWorkspace', {
      tenant,
      workspace,
      changes: listOf(changes, 'changes').map(recordChange),
      request_id: requestId ?? '',
    }, { metadata: extra, retry: Boolean(requestId) });
    return { applied: response.applied, generation: generationFrom(trailingMetadata, WORKSPACE_GENERATION_KEY) };
  }

  /** Every record of a scope and its generation, read together (paged here until complete). */
  async listRecords(tenant, scope) {
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const records = [];
      let generation = null;
      let pageToken = '';
      let changed = false;
      do {
        const { response } = await this._call(this.workspace, 'ListRecords', { tenant, scope, page_token: pageToken },
          { retry: true });
        const pageGeneration = BigInt(response.generation);
        if (generation !== null && pageGeneration !== generation) { changed = true; break; }
        generation = pageGeneration;
        records.push(...response.records.map((r) => ({ key: r.key, content: r.content })));
        pageToken = response.next_page_token;
      } while (pageToken);
      if (!changed) return { records, generation };
    }
    throw new MnemosyneError(grpc.status.ABORTED, 'RECORDS_CHANGED', 'the records kept changing while they were read; read them again');
  }

  /**
   * A browser-style edit: [{op: 'put'|'delete', key, content}] applied to `scope` if its generation
   * is still `expectedGeneration` (a request field, not metadata); resolves the new generation.
   */
  async editRecords(tenant, scope, changes, expectedGeneration, { requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.workspace, 'EditRecords', {
      tenant, scope, expected_generation: generationString(expectedGeneration, 'expectedGeneration'), changes: listOf(changes, 'changes').map(recordChange), request_id: requestId ?? '',
    }, { retry: Boolean(requestId) });
    return BigInt(response.generation);
  }

  /** A consolidation's changes under `receiptId` (applied once, however often it is sent). */
  async consolidate(tenant, scope, changes, expectedGeneration, receiptId) {
    const { response } = await this._call(this.workspace, 'Consolidate', {
      tenant, scope, expected_generation: generationString(expectedGeneration, 'expectedGeneration'), changes: listOf(changes, 'changes').map(recordChange), receipt_id: receiptId,
    }, { retry: true });
    return { generation: BigInt(response.generation), alreadyApplied: response.already_applied };
  }

  /** Turn a tenant's finished sessions (threads; `thread` one only) into records, each receipt once. */
  async consolidateSession(tenant, { thread = '' } = {}) {
    const { response } = await this._call(this.workspace, 'ConsolidateSession', { tenant, thread }, { retry: true });
    return response.scopes.map((o) => ({
      thread: o.thread,
      scope: o.scope,
      receiptId: o.receipt_id,
      outcome: String(o.outcome).replace('OUTCOME_', '').toLowerCase(),
      generation: BigInt(o.generation),
      modelCalls: Number(o.model_calls),
      conflicts: Number(o.conflicts),
    }));
  }
  /** A tenant's last hour per minute (writes, recalls, failed events, hot-path depth...), and its memories over its life. */
  async tenantFigures(tenant) {
    const { response: r } = await this._call(this.admin, 'GetTenantFigures', { tenant }, { retry: true });
    return {
      countingSince: dateFrom(r.counting_since),
      minutes: r.minutes.map((m) => ({
        start: dateFrom(m.start),
        writes: Number(m.writes),
        recalls: Number(m.recalls),
        failedEvents: Number(m.failed_events),
        hotPathDepth: optionalNumber(m, 'hot_path_depth'),
        oldestPendingSeconds: optionalNumber(m, 'oldest_pending_seconds'),
        fileBytes: optionalNumber(m, 'file_bytes'),
      })),
      memories: r.memories.map((m) => ({ at: dateFrom(m.at), memories: Number(m.memories) })),
      fileBytes: Number(r.file_bytes),
      hotPathDepth: Number(r.hot_path_depth),
      oldestPendingSeconds: r.oldest_pending_seconds,
    };
  }

  /** The largest, busiest and failing tenants (admin token), `limit` rows each (0: 10). */
  async listTenantFigures({ limit = 0 } = {}) {
    const { response: r } = await this._call(this.admin, 'ListTenantFigures', { limit }, { retry: true });
    return {
      tenants: Number(r.tenants),
      countingSince: dateFrom(r.counting_since),
      largest: r.largest.map(figuresRow),
      busiest: r.busiest.map(figuresRow),
      failing: r.failing.map(figuresRow),
      unansweredMembers: [...r.unanswered_members],
    };
  }

  // -- revisions and expiry (docs/revisions.md, docs/expiry.md) --------------------------------------

  /** Every revision of a memory, oldest first: who, which surface, when, what changed, its ledger entry. */
  async listMemoryRevisions(tenant, memoryId) {
    const { response } = await this._call(this.memory, 'ListMemoryRevisions', { tenant, memory_id: memoryId },
      { retry: true });
    return response.revisions.map(memoryRevision);
  }

  /** Restore a memory's text and metadata of `revision`, as a new revision (history is never rewritten). */
  async revertMemory(tenant, memoryId, revision, { requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.memory, 'RevertMemory', {
      tenant, memory_id: memoryId, revision, request_id: requestId ?? '',
    }, { retry: Boolean(requestId) });
    return { memory: memory(response.memory), revision: response.revision };
  }

  /** The tenant's expiry policy: default TTL of new memories, whether an update extends it, the grace. */
  async getExpiryPolicy(tenant) {
    const { response } = await this._call(this.memory, 'GetExpiryPolicy', { tenant }, { retry: true });
    return expiryPolicy(response.policy);
  }

  /** Set the tenant's expiry policy; `graceSeconds` left out keeps the current grace. */
  async setExpiryPolicy(tenant, { defaultTtlSeconds = 0, updateExtends = false, graceSeconds } = {}) {
    const policy = { default_ttl_seconds: defaultTtlSeconds, update_extends: updateExtends };
    if (graceSeconds !== undefined) policy.grace_seconds = graceSeconds;
    const { response } = await this._call(this.memory, 'SetExpiryPolicy', { tenant, policy }, { retry: true });
    return expiryPolicy(response.policy);
  }

  /** A record's revisions, oldest first, and the scope's generation now. */
  async listRecordRevisions(tenant, scope, key) {
    const { response } = await this._call(this.workspace, 'ListRecordRevisions', { tenant, scope, key }, { retry: true });
    return { revisions: response.revisions.map(recordRevision), generation: BigInt(response.generation) };
  }

  /** Put back a record's content as of `generation`, at `expectedGeneration` (the scope's new generation). */
  async revertRecord(tenant, scope, key, generation, expectedGeneration, { requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.workspace, 'RevertRecord', {
      tenant, scope, key, generation: generationString(generation), expected_generation: generationString(expectedGeneration, 'expectedGeneration'),
      request_id: requestId ?? '',
    }, { retry: Boolean(requestId) });
    return BigInt(response.generation);
  }

  // -- webhooks (docs/webhooks.md) ---------------------------------------------------------------

  /**
   * Subscribe `url` to the tenant's changes of `kinds` (WEBHOOK_KINDS' names); `includeText` puts
   * a memory's text in its payloads; `secrets` (`whsec_...`) sign them, one is made when none is
   * given. Returns {webhook, secrets}: the secrets made are shown only here.
   */
  async createWebhook(tenant, url, kinds, { includeText = false, secrets = [] } = {}) {
    const { response } = await this._call(this.webhooks, 'CreateWebhook', {
      tenant, url, kinds: listOf(kinds, 'kinds').map(webhookKind), include_text: includeText, secrets,
    });
    return { webhook: webhook(response.webhook), secrets: [...response.secrets] };
  }

  /** The tenant's subscriptions, with their state (failing, paused) and pending deliveries. */
  async listWebhooks(tenant) {
    const { response } = await this._call(this.webhooks, 'ListWebhooks', { tenant }, { retry: true });
    return response.webhooks.map(webhook);
  }

  /** Delete a subscription and its pending deliveries; false when there was none of that id. */
  async deleteWebhook(tenant, webhookId) {
    const { response } = await this._call(this.webhooks, 'DeleteWebhook', { tenant, webhook_id: webhookId },
      { retry: true });
    return response.deleted;
  }

  /** Add a signing secret (`secret`, or one made) and retire `retireSecretIds`; {webhook, secrets}. */
  async rotateWebhookSecret(tenant, webhookId, { secret = '', retireSecretIds = [] } = {}) {
    const { response } = await this._call(this.webhooks, 'RotateWebhookSecret', {
      tenant, webhook_id: webhookId, secret, retire_secret_ids: retireSecretIds,
    });
    return { webhook: webhook(response.webhook), secrets: response.secret ? [response.secret] : [] };
  }

  /** Deliver again after a pause: its pending deliveries are due at once. */
  async resumeWebhook(tenant, webhookId) {
    const { response } = await this._call(this.webhooks, 'ResumeWebhook', { tenant, webhook_id: webhookId },
      { retry: true });
    return webhook(response.webhook);
  }

  /** A subscription's delivery log, newest first, a page at a time. */
  async listWebhookDeliveries(tenant, webhookId, { pageSize = 0, pageToken = '' } = {}) {
    const { response } = await this._call(this.webhooks, 'ListWebhookDeliveries', {
      tenant, webhook_id: webhookId, page_size: pageSize, page_token: pageToken,
    }, { retry: true });
    return { deliveries: response.deliveries.map(webhookDelivery), nextPageToken: response.next_page_token };
  }
}

checkingArguments(MemoryClient);

module.exports = {
  MemoryClient, newRequestId, generationFrom, GLOBAL_GENERATION_KEY, WORKSPACE_GENERATION_KEY, WEBHOOK_KINDS,
};
