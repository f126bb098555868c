'use strict';
// MemoryClient: promise-based calls of MemoryService, WorkspaceService and AdminService.
// Generations (WorkspaceService) travel only in gRPC metadata, as decimal strings; this client
// returns them as BigInt (they are int64 on the server, exact above 2^53). Ids (int64) are
// decimal strings, exact as well.
//
// Retries, as in the Python client: a call is repeated only when repeating it is safe (reads,
// and writes that carry a request id, which every write gets unless the caller passes ''), at
// most `retries` times, when it failed with UNAVAILABLE (after 100 ms, then twice as long each
// time) or with RESOURCE_EXHAUSTED whose status details carry a google.rpc.RetryInfo (after its
// retry_delay, capped at `maxRetryDelayMs`). RESOURCE_EXHAUSTED without RetryInfo (a quota) is
// final.
const crypto = require('node:crypto');
const { setTimeout: sleep } = require('node:timers/promises');
const grpc = require('@grpc/grpc-js');
const { loadServices } = require('./protos');
const { fromServiceError, MnemosyneError } = require('./errors');

const GLOBAL_GENERATION_KEY = 'mnemosyne-global-generation';
const WORKSPACE_GENERATION_KEY = 'mnemosyne-workspace-generation';
const DECIMAL = /^[0-9]{1,19}$/;
const MAX_GENERATION = (1n << 63n) - 1n;
const RETRY_BACKOFF_MS = 100;
const DEFAULT_RETRIES = 3;
const DEFAULT_MAX_RETRY_DELAY_MS = 5000;

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

function generationString(generation) {
  const value = typeof generation === 'bigint' ? generation : BigInt(generation);
  if (value < 0n || value > MAX_GENERATION) throw new RangeError(`generation out of range: ${value}`);
  return value.toString(10);
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

/**
 * How long to wait before repeating a call that failed with `err`, or null when that failure is
 * final: UNAVAILABLE waits `backoffMs`, RESOURCE_EXHAUSTED with a RetryInfo its retry_delay (at
 * most `maxRetryDelayMs`).
 */
function retryDelay(err, backoffMs, maxRetryDelayMs) {
  if (!(err instanceof MnemosyneError)) return null;
  if (err.code === grpc.status.UNAVAILABLE) return backoffMs;
  if (err.code === grpc.status.RESOURCE_EXHAUSTED && err.retryDelayMs !== null) return Math.min(err.retryDelayMs, maxRetryDelayMs);
  return null;
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
  };
}

class MemoryClient {
  /**
   * @param {string} target host:port
   * @param {{token?: string, credentials?: grpc.ChannelCredentials, timeoutMs?: number, retries?: number,
   *   maxRetryDelayMs?: number}} [options]
   */
  constructor(target, options = {}) {
    const { MemoryService, WorkspaceService, AdminService } = loadServices();
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    this.memory = new MemoryService(target, credentials);
    // The same channel for every service.
    const channelOverride = { channelOverride: this.memory.getChannel() };
    this.workspace = new WorkspaceService(target, credentials, channelOverride);
    this.admin = new AdminService(target, credentials, channelOverride);
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.retries = options.retries ?? DEFAULT_RETRIES;
    this.maxRetryDelayMs = options.maxRetryDelayMs ?? DEFAULT_MAX_RETRY_DELAY_MS;
  }

  close() {
    this.memory.close();
  }

  _metadata(extraMetadata = {}) {
    const metadata = new grpc.Metadata();
    if (this.token) metadata.set('authorization', `Bearer ${this.token}`);
    for (const [key, value] of Object.entries(extraMetadata)) metadata.set(key, value);
    return metadata;
  }

  /**
   * One unary call, repeated under the rules in this file's header when `retry` (the caller says
   * repeating it is safe). Resolves {response, initialMetadata, trailingMetadata}; rejects with a
   * MnemosyneError carrying the ErrorInfo reason.
   */
  async _call(stub, method, request, { metadata = {}, retry = false, timeoutMs = this.timeoutMs } = {}) {
    let backoffMs = RETRY_BACKOFF_MS;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this._callOnce(stub, method, request, metadata, timeoutMs);
      } catch (err) {
        const delay = retry && attempt < this.retries ? retryDelay(err, backoffMs, this.maxRetryDelayMs) : null;
        if (delay === null) throw err;
        await sleep(delay);
        backoffMs *= 2;
      }
    }
  }

  _callOnce(stub, method, request, extraMetadata, timeoutMs) {
    const metadata = this._metadata(extraMetadata);
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
          reject(fromServiceError(err));
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

  /** `requestId: ''` sends none: the write is then never repeated. */
  async retain(tenant, text, { scope = '', metadata = {}, requestId = newRequestId() } = {}) {
    const { response } = await this._call(this.memory, 'Retain',
      { tenant, text, scope, metadata, request_id: requestId ?? '' }, { retry: Boolean(requestId) });
    return retainResult(response.result);
  }

  async recall(tenant, query, { k = 5, scopes = [], metadataEquals = {} } = {}) {
    const { response } = await this._call(this.memory, 'Recall',
      { tenant, query, k, scopes, metadata_equals: metadataEquals }, { retry: true });
    return response.hits.map((h) => ({ memory: memory(h.memory), score: h.score }));
  }

  async stats(tenant) {
    const { response } = await this._call(this.admin, 'Stats', { tenant }, { retry: true });
    return response;
  }

  // -- workspace (host-owned generations) ---------------------------------------------------------

  /** Records and recalled memories, with both generations from the response metadata. */
  async assembleContext(tenant, workspace, { query = '', k = 5 } = {}) {
    const { response, initialMetadata } = await this._call(this.workspace, 'AssembleContext',
      { tenant, workspace, query, k }, { retry: true });
    return {
      globalRecords: response.global_records.map((r) => ({ key: r.key, content: r.content })),
      workspaceRecords: response.workspace_records.map((r) => ({ key: r.key, content: r.content })),
      memories: response.memories.map((h) => ({ memory: memory(h.memory), score: h.score })),
      globalGeneration: generationFrom(initialMetadata, GLOBAL_GENERATION_KEY),
      workspaceGeneration: generationFrom(initialMetadata, WORKSPACE_GENERATION_KEY),
    };
  }

  /**
   * Replace MEMORY.md if the Global generation is still `observedGeneration`; resolves the new
   * generation (trailing metadata). `observedGeneration` null/undefined sends no metadata (the
   * server then fails with OBSERVATION_MISSING): there is no "latest" default.
   */
  async updateGlobal(tenant, content, { observedGeneration, requestId = newRequestId() } = {}) {
    const extra = observedGeneration == null ? {} : { [GLOBAL_GENERATION_KEY]: generationString(observedGeneration) };
    const { trailingMetadata } = await this._call(this.workspace, 'UpdateGlobal',
      { tenant, content, request_id: requestId ?? '' }, { metadata: extra, retry: Boolean(requestId) });
    return generationFrom(trailingMetadata, GLOBAL_GENERATION_KEY);
  }

  /** Apply [{op: 'put'|'delete', key, content}] to a workspace as one generation. */
  async updateWorkspace(tenant, workspace, changes, { observedGeneration, requestId = newRequestId() } = {}) {
    const extra = observedGeneration == null ? {} : { [WORKSPACE_GENERATION_KEY]: generationString(observedGeneration) };
    const { response, trailingMetadata } = await this._call(this.workspace, 'UpdateWorkspace', {
      tenant,
      workspace,
      changes: changes.map((c) => ({ op: c.op === 'put' ? 'PUT' : 'DELETE', key: c.key, content: c.content ?? '' })),
      request_id: requestId ?? '',
    }, { metadata: extra, retry: Boolean(requestId) });
    return { applied: response.applied, generation: generationFrom(trailingMetadata, WORKSPACE_GENERATION_KEY) };
  }
}

module.exports = {
  MemoryClient, newRequestId, generationFrom, GLOBAL_GENERATION_KEY, WORKSPACE_GENERATION_KEY,
};
