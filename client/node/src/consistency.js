'use strict';
// Session consistency (docs/hot-path.md "Read your own writes"; the Python client's
// service/host/consistency.py is the same rule). Every write returns a consistency token; the
// client keeps, per tenant, the newest tokens its writes returned and sends them (request
// metadata `mnemosyne-consistency-token`) with its next calls of that tenant:
// - a READ that can wait (Recall, GetMemory, ListMemories, AssembleContext) then answers once
//   those writes are visible or failed, so the client reads its own writes;
// - a WRITE folds them into the token it returns, which then replaces every token it carried.
// Which calls are which is read from the protos: a write's response has a `consistency_token`; a
// read that waits has one in its request and a `consistency` report in its response (Flush, a
// barrier over the whole queue, is neither).
//
// Two writes of one tenant in flight at once each carry the same tokens and each return one that
// does not cover the other's write: both are kept until a later write carries them together (at
// most MAX_TOKENS_PER_TENANT; past it the oldest is dropped). A token the server refuses for
// good (DROPPED_REASONS) is dropped, so the next call of the tenant carries none; the refusal is
// thrown to the caller. At most `tenants` tenants are kept, the least recently used forgotten first.
const { loadServices } = require('./protos');

const TOKEN_KEY = 'mnemosyne-consistency-token';
const TOKEN_FIELD = 'consistency_token';
// Refused for good: TIMELINE_CHANGED (the tenant was restored or imported over since), WRITE_LOST
// (a position the tenant never durably held), TOKEN_INVALID (not issued for the tenant's current
// file, as after an erasure and a new tenant of that name), TOKEN_FOREIGN (another tenant's).
const DROPPED_REASONS = new Set(['TIMELINE_CHANGED', 'WRITE_LOST', 'TOKEN_INVALID', 'TOKEN_FOREIGN']);
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

  /** A write answered: its token replaces the tokens it carried; tokens added meanwhile stay. */
  answered(tenant, sent, token) {
    if (token) this._replace(tenant, sent, token);
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
