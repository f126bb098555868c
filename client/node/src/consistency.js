'use strict';
// Session consistency (docs/hot-path.md "Read your own writes"; the Python client's
// service/host/consistency.py is the same rule). Every write returns a consistency token; the
// client keeps, per tenant, the newest token its writes returned and sends it (request metadata
// `mnemosyne-consistency-token`; the server takes one token a call) with its next calls of it:
// - a WRITE folds it into the token it returns, which then replaces the one it carried (a write
//   that carried none and queued nothing is visible already: its token is not kept);
// - a READ that can wait (Recall, GetMemory, ListMemories, AssembleContext) answers once those
//   writes are visible or failed, so the client reads its own writes; after it, they are, so
//   the token is dropped and the next reads carry none.
// Which calls are which is read from the protos: a write's response has a `consistency_token`; a
// read that waits has one in its request and a `consistency` report in its response (Flush, a
// barrier over the whole queue, is neither).
//
// Two writes of one tenant in flight at once carry the same token and each return one that does
// not cover the other's write: both are kept, a later write carries the newest, and a read waits
// for the older ones first with a Flush of each (it waits for a token's writes only), then reads
// with the newest (at most MAX_TOKENS_PER_TENANT; past it the oldest is dropped). A token the
// server refuses for good (DROPPED_REASONS) is dropped, so the next call of the tenant carries
// none; the refusal is thrown to the caller. At most `tenants` tenants are kept, the least
// recently used forgotten first.
const { loadServices } = require('./protos');

const TOKEN_KEY = 'mnemosyne-consistency-token';
const TOKEN_FIELD = 'consistency_token';
// Refused for good: TIMELINE_CHANGED (the tenant was restored, imported over or erased since),
// TOKEN_INVALID (altered or made up), TOKEN_FOREIGN (another tenant's).
const DROPPED_REASONS = new Set(['TIMELINE_CHANGED', 'TOKEN_INVALID', 'TOKEN_FOREIGN']);
const MAX_TENANTS = 10000;
const MAX_TOKENS_PER_TENANT = 8;

let roles;
/** RPC path ('/mnemosyne.v1.MemoryService/Retain') -> 'read' | 'write', from the protos. */
function sessionRoles() {
  if (!roles) {
    roles = new Map();
    for (const service of Object.values(loadServices())) {
      for (const method of Object.values(service.service)) {
        const fields = (type) => new Set(type.type.field.map((f) => f.name));
        const request = fields(method.requestType);
        const response = fields(method.responseType);
        if (response.has(TOKEN_FIELD)) roles.set(method.path, 'write');
        else if (request.has(TOKEN_FIELD) && response.has('consistency')) roles.set(method.path, 'read');
      }
    }
  }
  return roles;
}

/** 'read', 'write' or undefined (a call that carries no session token) for `method` of `stub`. */
function roleOf(stub, method) {
  const definition = stub.constructor.service[method];
  return definition ? sessionRoles().get(definition.path) : undefined;
}

/**
 * Whether a write's response names an operation it queued (a fast retain's ENQUEUED result). A
 * write that queued nothing is visible when it answers, so its token names nothing to wait for
 * unless it carried one: the session keeps no such token (reads stay as cheap as without one).
 */
function queued(response) {
  const results = [response.result, ...(response.results ?? [])].filter(Boolean);
  return results.some((r) => r.status === 'ENQUEUED');
}

class SessionTokens {
  constructor(tenants = MAX_TENANTS) {
    if (!Number.isInteger(tenants) || tenants < 1) throw new RangeError(`sessionTenants must be a whole number >= 1, not ${tenants}`);
    this._tenants = tenants;
    this._tokens = new Map(); // tenant -> tokens, oldest first; the Map's order is the LRU order
  }

  get size() {
    return this._tokens.size;
  }

  /** What the next call of `tenant` carries (usually one token). */
  tokens(tenant) {
    const tokens = this._tokens.get(tenant);
    if (!tokens) return [];
    this._tokens.delete(tenant);
    this._tokens.set(tenant, tokens);
    return tokens;
  }

  /** The token of the latest write of `tenant`, or null. */
  newest(tenant) {
    const tokens = this.tokens(tenant);
    return tokens.length ? tokens[tokens.length - 1] : null;
  }

  /**
   * The tokens a call of `role` answers for, oldest first: a read's, all (it carries the newest
   * and waits for the others first); a write's, the newest.
   */
  outgoing(role, tenant) {
    const tokens = this.tokens(tenant);
    return role === 'read' ? tokens : tokens.slice(-1);
  }

  /**
   * A call answered: a write's token replaces the one it carried; a read's tokens go (their
   * writes are visible or failed now). Tokens added meanwhile stay.
   */
  answered(role, tenant, sent, response) {
    if (role === 'write' && response.consistency_token && (sent.length || queued(response))) {
      this._replace(tenant, sent, response.consistency_token);
    } else if (role === 'read' && sent.length) this._replace(tenant, sent, null);
  }

  /** Drop every token of `tenant` (it was erased or imported over: its writes are gone). */
  forget(tenant) {
    this._tokens.delete(tenant);
  }

  /** A call refused: tokens refused for good are dropped. */
  refused(tenant, sent, reason) {
    if (sent.length && DROPPED_REASONS.has(reason)) this._replace(tenant, sent, null);
  }

  _replace(tenant, sent, token) {
    const kept = (this._tokens.get(tenant) ?? []).filter((t) => !sent.includes(t));
    if (token) kept.push(token);
    this._tokens.delete(tenant);
    if (!kept.length) return;
    this._tokens.set(tenant, Object.freeze(kept.slice(-MAX_TOKENS_PER_TENANT)));
    while (this._tokens.size > this._tenants) this._tokens.delete(this._tokens.keys().next().value);
  }
}

module.exports = {
  SessionTokens, roleOf, TOKEN_KEY, DROPPED_REASONS, MAX_TENANTS, MAX_TOKENS_PER_TENANT,
};
