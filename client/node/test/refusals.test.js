'use strict';
// Arguments that make no request are refused before anything is sent, with a RequestInvalidError
// carrying the reason the server gives the same fault (the Python client's
// tests/test_client_refusals.py is the same promise): every slot of each kind below (a text, an
// integer, a time, a deadline, a name, a member id, a consistency token) is given each hostile
// value of its kind. Before, protobufjs sent a lone surrogate as bytes no server decodes, wrapped
// or truncated numbers (a memory id of 2**64 read memory 384, 1.5 read memory 1, k 2**40 recalled),
// failed a BigInt k as INTERNAL, a bad Date was a RangeError, and a deadline past grpc-js's range
// threw outside the call's promise, ending the process.
const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { MemoryClient, MnemosyneError, RequestInvalidError, TokenInvalidError } = require('../src');
const { startServer, uniqueTenant } = require('../test-support/support');

let server;
let client;
test.before(async () => {
  server = await startServer();
  client = new MemoryClient(server.target, { timeoutMs: 20000 });
});
test.after(async () => {
  client?.close();
  await server?.stop();
});

const TENANT = uniqueTenant(); // never made: nothing is sent for it
const MANIFEST = { tenant: TENANT, files: [] };

async function drained(stream) {
  for await (const part of stream) { void part; break; }
}

// An object of no prototype (a JSON-like map: Object.create(null)) has no toString: naming it in a
// refusal threw JS's own TypeError ('Cannot convert object to primitive value') instead.
const BARE = Object.create(null);
const HOSTILE = {
  text: ['x\ud800', '\udfffy', 'a\ud83d\ude00b\udc00'],
  integer: [2 ** 64, -(2 ** 64), 2n ** 64n, -(2n ** 64n), 1.5, NaN, Infinity, -Infinity, 1e300, 'abc', '1.5', true, BARE],
  // A time taken as a Date or unix seconds (occurredAt, expiresAt, acceptedAfter, as the Python
  // client's occurred_at, expires_at, accepted_after): no time, or one outside the years 1 to 9999,
  // is the field's reason; a value of another type REQUEST_UNDECODABLE, as the Python client's
  // ArgumentTypeError (docs/http-api.md "One mistake, one reason"). occurredAt 'yesterday' was
  // OCCURRED_AT_INVALID, acceptedAfter's TIMESTAMP_INVALID.
  dateOrSeconds: [new Date(NaN), new Date(8.64e15), new Date(-8.64e15), new Date(Date.UTC(10000, 0, 1)), NaN, Infinity, -Infinity,
    1e300, -1e300, 253402300800, -62135596801],
  notDateOrSeconds: ['yesterday', '1700000000', 1700000000n, true, {}, ['x'], Symbol('x'), () => 1, BARE],
  timeoutMs: [NaN, Infinity, -Infinity, -1, 0, 1e300, 2 ** 40],
  name: ['pause', '', 'STATUS', 'constructor', 'toString'],
  member: ['Not A Member', 'm\ud800', 'm\n1', '-m1', 'm'.repeat(64)],
  token: ['a\nb', 'é', 'x\ud800', '\u0000'],
  // A value of another type than a name's, a member id's, a token's or a target's (a text), or a
  // deadline's (a number): REQUEST_UNDECODABLE, as the Python client's ArgumentTypeError; each was
  // the field's own reason (HOT_PATH_ACTION_INVALID, MEMBER_ID_INVALID, TOKEN_MALFORMED,
  // TOKEN_INVALID, TIMEOUT_INVALID), a false consistency token read none, a BigInt or an object
  // of no prototype as a hot-path wait JS's own TypeError, a target grpc-js's.
  notText: [5, 1.5, true, false, 5n, {}, ['x'], BARE],
  notNumber: ['1000', true, 5n, {}, ['x'], BARE],
  // A value of another shape than its field's (a text, a list, an object of texts): protobufjs sent
  // "[object Object]" as a text, or failed as a local INTERNAL; a number went as its text (5 as "5").
  shape: [{ text: 'x' }, ['x'], true, Symbol('x'), () => 'x', 5, 5n, 1.5, BARE],
  list: ['global', { 0: 'global' }, 5, BARE],
  map: ['a=b', ['a'], 5],
  // retainConversation's messages: {role, content, name?} objects or [role, content] pairs
  // (refused REQUEST_UNDECODABLE by the Python client too, for its mappings and pairs).
  messages: ['user: hi', { role: 'user', content: 'hi' }, 5, BARE, ['hi'], [5], [null], [['user', 'hi', 'x']], [['user']],
    [{ role: 5, content: 'hi' }], [{ role: ['user'], content: 'hi' }],
    [['user', 5]], [{ role: 'user', content: 'hi', name: 5 }], [['u\ud800', 'hi']], [['user', 'x\ud800']],
    [{ role: 'user', content: 'hi', name: '\udc00' }]],
  // importTenant's chunks: an iterable or async iterable of chunks, not a text (the Python client's
  // ArgumentTypeError too). A number or an object was JS's own TypeError ('chunks is not async
  // iterable'), a text read as chunks of one character each.
  chunks: [5, true, {}, 'a text', BARE],
};

// [kind, slot, call(value), reason (default: the kind's)]
const REASONS = {
  text: 'REQUEST_UNDECODABLE', shape: 'REQUEST_UNDECODABLE', notText: 'REQUEST_UNDECODABLE', notNumber: 'REQUEST_UNDECODABLE', messages: 'REQUEST_UNDECODABLE', chunks: 'REQUEST_UNDECODABLE', list: 'REQUEST_UNDECODABLE', map: 'REQUEST_UNDECODABLE', integer: 'NUMBER_INVALID', timeoutMs: 'TIMEOUT_INVALID', member: 'MEMBER_ID_INVALID', token: 'TOKEN_INVALID',
};
const SLOTS = [
  ['text', 'retain tenant', (v) => client.retain(v, 'tea')],
  ['text', 'retain text', (v) => client.retain(TENANT, v)],
  ['text', 'retain scope', (v) => client.retain(TENANT, 'tea', { scope: v })],
  ['text', 'retain metadata key', (v) => client.retain(TENANT, 'tea', { metadata: { [v]: 'x' } })],
  ['text', 'retain metadata value', (v) => client.retain(TENANT, 'tea', { metadata: { k: v } })],
  ['text', 'retain speaker', (v) => client.retain(TENANT, 'tea', { speaker: v })],
  ['text', 'retain requestId', (v) => client.retain(TENANT, 'tea', { requestId: v })],
  ['text', 'retain thread id', (v) => client.retain(TENANT, 'tea', { thread: { id: v, position: 1 } })],
  ['text', 'retainBatch item', (v) => client.retainBatch(TENANT, ['tea', v])],
  ['text', 'recall query', (v) => client.recall(TENANT, v)],
  ['text', 'recall scopes', (v) => client.recall(TENANT, 'tea', { scopes: [v] })],
  ['text', 'listMemories pageToken', (v) => client.listMemories(TENANT, { pageToken: v })],
  ['text', 'updateMemory text', (v) => client.updateMemory(TENANT, 1, { text: v })],
  ['text', 'getRecord key', (v) => client.getRecord(TENANT, 'global', v)],
  ['text', 'updateGlobal content', (v) => client.updateGlobal(TENANT, v, { observedGeneration: 0 })],
  ['text', 'updateWorkspace key', (v) => client.updateWorkspace(TENANT, 'w', [{ op: 'put', key: v, content: 'x' }], { observedGeneration: 0 })],
  ['text', 'assembleContext workspace', (v) => client.assembleContext(TENANT, v)],
  ['text', 'consolidate receiptId', (v) => client.consolidate(TENANT, 'global', [], 0, v)],
  ['text', 'createWebhook url', (v) => client.createWebhook(TENANT, v, ['memory.created'])],
  ['text', 'hotPath flush consistencyToken', (v) => client.hotPath(TENANT, 'flush', { consistencyToken: v })],
  ['text', 'eraseTenant tenant', (v) => client.eraseTenant(v)],
  ['text', 'backup tenants', (v) => drained(client.backup({ tenants: [v] }))],
  ['text', 'exportTenant tenant', (v) => drained(client.exportTenant(v))],
  ['chunks', 'importTenant chunks', (v) => client.importTenant(MANIFEST, v)],
  ['text', 'watchEvents tenant', (v) => drained(client.watchEvents(v, { timeoutMs: 5000 }))],
  ['text', 'importTenant tenant', (v) => client.importTenant(MANIFEST, [], { tenant: v })],
  ['text', 'moveTenant destination', (v) => client.moveTenant(TENANT, v)],
  ['shape', 'retain tenant', (v) => client.retain(v, 'tea')],
  ['shape', 'retain text', (v) => client.retain(TENANT, v)],
  ['shape', 'retain metadata value', (v) => client.retain(TENANT, 'tea', { metadata: { k: v } })],
  ['shape', 'retainBatch item text', (v) => client.retainBatch(TENANT, [{ text: v }])],
  ['shape', 'updateGlobal content', (v) => client.updateGlobal(TENANT, v, { observedGeneration: 0 })],
  ['shape', 'getRecord key', (v) => client.getRecord(TENANT, 'global', v)],
  ['list', 'recall scopes', (v) => client.recall(TENANT, 'tea', { scopes: v })],
  ['list', 'backup tenants', (v) => drained(client.backup({ tenants: v }))],
  ['list', 'rotateWebhookSecret retireSecretIds', (v) => client.rotateWebhookSecret(TENANT, 1, { retireSecretIds: v })],
  // Lists the client maps before the request is built: JS's own TypeError from .map before.
  ['list', 'retainBatch items', (v) => client.retainBatch(TENANT, v)],
  ['list', 'updateWorkspace changes', (v) => client.updateWorkspace(TENANT, 'w', v, { observedGeneration: 0 })],
  ['list', 'editRecords changes', (v) => client.editRecords(TENANT, 'global', v, 0)],
  ['list', 'consolidate changes', (v) => client.consolidate(TENANT, 'global', v, 0, 'r1')],
  ['list', 'createWebhook kinds', (v) => client.createWebhook(TENANT, 'https://hooks.example.com/in', v)],
  ['messages', 'retainConversation messages', (v) => client.retainConversation(TENANT, v)],
  ['text', 'retainConversation scope', (v) => client.retainConversation(TENANT, [['user', 'hi']], { scope: v })],
  ['map', 'recall metadataEquals', (v) => client.recall(TENANT, 'tea', { metadataEquals: v })],
  ['map', 'retain metadata', (v) => client.retain(TENANT, 'tea', { metadata: v })],
  ['map', 'forgetMemories metadataEquals', (v) => client.forgetMemories(TENANT, v)],
  ['integer', 'recall k', (v) => client.recall(TENANT, 'tea', { k: v })],
  ['integer', 'retain thread position', (v) => client.retain(TENANT, 'tea', { thread: { id: 's', position: v } })],
  ['integer', 'retainBatch thread position', (v) => client.retainBatch(TENANT, [{ text: 'tea', thread: { id: 's', position: v } }])],
  ['integer', 'getMemory id', (v) => client.getMemory(TENANT, v)],
  ['integer', 'forget id', (v) => client.forget(TENANT, v)],
  ['integer', 'updateMemory id', (v) => client.updateMemory(TENANT, v, { text: 'x' })],
  ['integer', 'listMemoryVersions id', (v) => client.listMemoryVersions(TENANT, v)],
  ['integer', 'revertMemory revision', (v) => client.revertMemory(TENANT, 1, v)],
  ['integer', 'listMemories pageSize', (v) => client.listMemories(TENANT, { pageSize: v })],
  ['integer', 'getEvent id', (v) => client.getEvent(TENANT, v)],
  ['integer', 'listEvents pageSize', (v) => client.listEvents(TENANT, { pageSize: v })],
  ['integer', 'watchEvents afterSequence', (v) => drained(client.watchEvents(TENANT, { afterSequence: v, timeoutMs: 5000 }))],
  ['integer', 'watchEvents afterEventId', (v) => drained(client.watchEvents(TENANT, { afterEventId: v, timeoutMs: 5000 }))],
  ['integer', 'updateGlobal observedGeneration', (v) => client.updateGlobal(TENANT, 'x', { observedGeneration: v })],
  ['integer', 'editRecords expectedGeneration', (v) => client.editRecords(TENANT, 'global', [], v)],
  ['integer', 'revertRecord generation', (v) => client.revertRecord(TENANT, 'global', 'k', v, 0)],
  ['integer', 'setExpiryPolicy defaultTtlSeconds', (v) => client.setExpiryPolicy(TENANT, { defaultTtlSeconds: v })],
  ['integer', 'setExpiryPolicy graceSeconds', (v) => client.setExpiryPolicy(TENANT, { graceSeconds: v })],
  ['integer', 'listTenants pageSize', (v) => client.listTenants({ pageSize: v })],
  ['integer', 'listTenantFigures limit', (v) => client.listTenantFigures({ limit: v })],
  ['integer', 'reembedTenant chunkSize', (v) => client.reembedTenant(TENANT, 'hashing', { chunkSize: v })],
  ['integer', 'aggregateStats chunkSize', (v) => client.aggregateStats({ chunkSize: v })],
  ['integer', 'activateTenant epoch', (v) => client.activateTenant(TENANT, v, 'h')],
  ['integer', 'deleteWebhook id', (v) => client.deleteWebhook(TENANT, v)],
  ['integer', 'rotateWebhookSecret retireSecretIds', (v) => client.rotateWebhookSecret(TENANT, 1, { retireSecretIds: [v] })],
  ['integer', 'listWebhookDeliveries pageSize', (v) => client.listWebhookDeliveries(TENANT, 1, { pageSize: v })],
  ['dateOrSeconds', 'retain occurredAt', (v) => client.retain(TENANT, 'tea', { occurredAt: v }), 'OCCURRED_AT_INVALID'],
  ['notDateOrSeconds', 'retain occurredAt', (v) => client.retain(TENANT, 'tea', { occurredAt: v }), 'REQUEST_UNDECODABLE'],
  ['dateOrSeconds', 'retainConversation occurredAt', (v) => client.retainConversation(TENANT, [['user', 'hi']], { occurredAt: v }), 'OCCURRED_AT_INVALID'],
  ['notDateOrSeconds', 'retainConversation occurredAt', (v) => client.retainConversation(TENANT, [['user', 'hi']], { occurredAt: v }), 'REQUEST_UNDECODABLE'],
  ['dateOrSeconds', 'retainBatch occurredAt', (v) => client.retainBatch(TENANT, [{ text: 'tea', occurredAt: v }]), 'OCCURRED_AT_INVALID'],
  ['notDateOrSeconds', 'retainBatch occurredAt', (v) => client.retainBatch(TENANT, [{ text: 'tea', occurredAt: v }]), 'REQUEST_UNDECODABLE'],
  ['dateOrSeconds', 'retain expiresAt', (v) => client.retain(TENANT, 'tea', { expiresAt: v }), 'EXPIRES_AT_INVALID'],
  ['dateOrSeconds', 'retainBatch expiresAt', (v) => client.retainBatch(TENANT, [{ text: 'tea', expiresAt: v }]), 'EXPIRES_AT_INVALID'],
  ['dateOrSeconds', 'retainConversation expiresAt', (v) => client.retainConversation(TENANT, [['user', 'hi']], { expiresAt: v }), 'EXPIRES_AT_INVALID'],
  ['dateOrSeconds', 'updateMemory expiresAt', (v) => client.updateMemory(TENANT, 1, { expiresAt: v }), 'EXPIRES_AT_INVALID'],
  ['notDateOrSeconds', 'retain expiresAt', (v) => client.retain(TENANT, 'tea', { expiresAt: v }), 'REQUEST_UNDECODABLE'],
  ['notDateOrSeconds', 'retainBatch expiresAt', (v) => client.retainBatch(TENANT, [{ text: 'tea', expiresAt: v }]), 'REQUEST_UNDECODABLE'],
  ['notDateOrSeconds', 'retainConversation expiresAt', (v) => client.retainConversation(TENANT, [['user', 'hi']], { expiresAt: v }), 'REQUEST_UNDECODABLE'],
  ['notDateOrSeconds', 'updateMemory expiresAt', (v) => client.updateMemory(TENANT, 1, { expiresAt: v }), 'REQUEST_UNDECODABLE'],
  ['dateOrSeconds', 'listEvents acceptedAfter', (v) => client.listEvents(TENANT, { acceptedAfter: v }), 'TIMESTAMP_INVALID'],
  ['notDateOrSeconds', 'listEvents acceptedAfter', (v) => client.listEvents(TENANT, { acceptedAfter: v }), 'REQUEST_UNDECODABLE'],
  ['timeoutMs', 'the client timeoutMs', async (v) => new MemoryClient(server.target, { timeoutMs: v }).ping()],
  ['timeoutMs', 'watchEvents timeoutMs', (v) => drained(client.watchEvents(TENANT, { timeoutMs: v }))],
  ['timeoutMs', 'backup timeoutMs', (v) => drained(client.backup({ tenants: [TENANT], timeoutMs: v }))],
  ['timeoutMs', 'exportTenant timeoutMs', (v) => drained(client.exportTenant(TENANT, { timeoutMs: v }))],
  ['timeoutMs', 'aggregateStats timeoutMs', (v) => client.aggregateStats({ timeoutMs: v })],
  ['timeoutMs', 'importTenant timeoutMs', (v) => client.importTenant(MANIFEST, [], { timeoutMs: v })],
  ['timeoutMs', 'moveTenant timeoutMs', (v) => client.moveTenant(TENANT, 'm2', { timeoutMs: v })],
  ['name', 'hotPath action', (v) => client.hotPath(TENANT, v), 'HOT_PATH_ACTION_INVALID'],
  ['name', 'listEvents status', (v) => client.listEvents(TENANT, { status: v }), 'EVENT_STATUS_INVALID'],
  ['name', 'createWebhook kinds', (v) => client.createWebhook(TENANT, 'https://hooks.example.com/in', [v]), 'WEBHOOK_KINDS_INVALID'],
  ['member', 'moveTenant member', (v) => client.moveTenant(TENANT, 'm2', { member: v })],
  ['member', 'activateTenant member', (v) => client.activateTenant(TENANT, 1, 'h', { member: v })],
  ['token', 'the client token', async (v) => new MemoryClient(server.target, { token: v }).ping(), 'TOKEN_MALFORMED'],
  ['token', 'recall consistencyToken', (v) => client.recall(TENANT, 'tea', { consistencyToken: v })],
  ['token', 'getMemory consistencyToken', (v) => client.getMemory(TENANT, 1, { consistencyToken: v })],
  ['token', 'listMemories consistencyToken', (v) => client.listMemories(TENANT, { consistencyToken: v })],
  ['token', 'assembleContext consistencyToken', (v) => client.assembleContext(TENANT, 'w', { consistencyToken: v })],
  ['notText', 'hotPath action', (v) => client.hotPath(TENANT, v)],
  ['notText', 'listEvents status', (v) => client.listEvents(TENANT, { status: v })],
  ['notText', 'createWebhook kinds', (v) => client.createWebhook(TENANT, 'https://hooks.example.com/in', [v])],
  ['notText', 'moveTenant member', (v) => client.moveTenant(TENANT, 'm2', { member: v })],
  ['notText', 'activateTenant member', (v) => client.activateTenant(TENANT, 1, 'h', { member: v })],
  ['notText', 'the client token', async (v) => new MemoryClient(server.target, { token: v }).ping()],
  ['notText', 'the client target', async (v) => new MemoryClient(v).ping()],
  ['notText', 'recall consistencyToken', (v) => client.recall(TENANT, 'tea', { consistencyToken: v })],
  ['notText', 'assembleContext consistencyToken', (v) => client.assembleContext(TENANT, 'w', { consistencyToken: v })],
  ['notText', 'hotPath flush consistencyToken', (v) => client.hotPath(TENANT, 'flush', { consistencyToken: v })],
  ['notNumber', 'the client timeoutMs', async (v) => new MemoryClient(server.target, { timeoutMs: v }).ping()],
  ['notNumber', 'watchEvents timeoutMs', (v) => drained(client.watchEvents(TENANT, { timeoutMs: v }))],
  ['notNumber', 'exportTenant timeoutMs', (v) => drained(client.exportTenant(TENANT, { timeoutMs: v }))],
  ['notNumber', 'moveTenant timeoutMs', (v) => client.moveTenant(TENANT, 'm2', { timeoutMs: v })],
  ['notNumber', 'hotPath timeoutSeconds', (v) => client.hotPath(TENANT, 'flush', { timeoutSeconds: v })],
];

function shown(value) {
  return typeof value === 'bigint' ? `${value}n` : JSON.stringify(value) ?? String(value);
}

test('every hostile argument is refused before sending, with the reason the server gives it', async () => {
  const wrong = [];
  for (const [kind, slot, call, reason = REASONS[kind]] of SLOTS) {
    for (const value of HOSTILE[kind]) {
      let outcome;
      try {
        await call(value);
        outcome = 'answered';
      } catch (err) {
        const expected = reason === 'TOKEN_INVALID' ? TokenInvalidError : RequestInvalidError;
        outcome = err instanceof expected && err.code === grpc.status.INVALID_ARGUMENT && err.reason === reason
          ? 'refused' : `${err.name} ${err.reason ?? ''}: ${String(err.message).slice(0, 120)}`;
      }
      if (outcome !== 'refused') wrong.push(`${slot} = ${shown(value)}: ${outcome}`);
    }
  }
  assert.deepEqual(wrong, []);
  // Nothing was sent: the tenant was never made.
  assert.ok(!(await client.listTenants()).tenants.includes(TENANT));
});

test('a closed client refuses every call', async () => {
  // grpc-js's own Error ('Channel has been shut down') before, no MnemosyneError.
  const closed = new MemoryClient(server.target, { timeoutMs: 10000 });
  await closed.ping();
  closed.close();
  const calls = [() => closed.ping(), () => closed.recall(TENANT, 'tea'), () => closed.hotPath(TENANT, 'flush'),
    () => drained(closed.watchEvents(TENANT, { timeoutMs: 5000 })), () => closed.importTenant(MANIFEST, [])];
  for (const call of calls) {
    await assert.rejects(call(), (err) => err instanceof MnemosyneError && err.code === grpc.status.FAILED_PRECONDITION
      && err.reason === 'CLIENT_CLOSED' && /make a new one/.test(err.details));
  }
  closed.close(); // again: nothing to do
});

test('a request over the client\'s maxRequestBytes is refused REQUEST_TOO_LARGE before it is sent', async () => {
  // grpc-js sent any size: one over twice the server's --max-request-bytes got gRPC core's
  // RESOURCE_EXHAUSTED without ErrorInfo, where the Python client refuses it first, with the reason.
  const huge = Array(1100).fill('x'.repeat(32768)); // 36 MB, within max_batch_items and max_text_chars
  await assert.rejects(client.retainBatch(TENANT, huge), (err) => err instanceof RequestInvalidError
    && err.reason === 'REQUEST_TOO_LARGE' && err.metadata.limit === '16777216'
    && /^the request has 360\d{5} bytes; this client's limit is 16777216 \(new MemoryClient\(target, \{maxRequestBytes\}\)/.test(err.details));
  // Measured exactly: a request of the limit's size goes, one byte more does not.
  const retain = (maxRequestBytes) => {
    const limited = new MemoryClient(server.target, { maxRequestBytes });
    return limited.retain(TENANT, 'tea', { scope: 'nowhere' }).finally(() => limited.close());
  };
  const size = await retain(1).then(() => null, (err) => Number(err.metadata.limit === '1'
    && /^the request has (\d+) bytes/.exec(err.details)[1]));
  assert.ok(size > 40, `${size}`);
  await assert.rejects(retain(size - 1), { reason: 'REQUEST_TOO_LARGE', metadata: { limit: String(size - 1) } });
  await assert.rejects(retain(size), { reason: 'SCOPE_INVALID' }); // sent: the server's refusal
  assert.throws(() => new MemoryClient(server.target, { maxRequestBytes: 0 }),
    { details: 'MemoryClient: maxRequestBytes is 0; it takes a whole number from 1 to 9007199254740991' });
  assert.ok(!(await client.listTenants()).tenants.includes(TENANT));
});

test('each message a stream sends is refused REQUEST_TOO_LARGE over the client\'s maxRequestBytes', async () => {
  // Only a unary call's request was measured: an import's messages (its manifest, each chunk) and a
  // server stream's request went at any size, one over twice the server's --max-request-bytes
  // getting gRPC core's RESOURCE_EXHAUSTED without ErrorInfo. A client of a 4 KiB limit stands in
  // for one of 16 MiB.
  const limited = new MemoryClient(server.target, { maxRequestBytes: 4096 });
  const tooLarge = (err) => err instanceof RequestInvalidError && err.reason === 'REQUEST_TOO_LARGE'
    && err.metadata.limit === '4096' && /^the request has \d{4,5} bytes; this client's limit is 4096 /.test(err.details);
  try {
    // A manifest the server takes (it then waits for the chunks): the chunk is refused here, and the import cancelled.
    const manifest = { ...MANIFEST, files: [{ name: 'database', size: 8192, sha256: '0'.repeat(64) }] };
    await assert.rejects(limited.importTenant(manifest, [{ file: 'database', data: Buffer.alloc(8192) }]), tooLarge);
    await assert.rejects(limited.importTenant({ ...MANIFEST, head_hash: 'a'.repeat(8192) }, []), tooLarge);
    await assert.rejects(drained(limited.backup({ tenants: Array(500).fill(TENANT) })), tooLarge);
    await assert.rejects(drained(limited.exportTenant('t'.repeat(8192))), tooLarge);
    await assert.rejects(drained(limited.watchEvents('t'.repeat(8192), { timeoutMs: 5000 })), tooLarge);
  } finally {
    limited.close();
  }
  assert.ok(!(await client.listTenants()).tenants.includes(TENANT));
});

test('an empty target is refused unless members are given', () => {
  // grpc-js's TypeError 'Channel target must be a string' before (it is one).
  for (const target of ['', '  ']) {
    assert.throws(() => new MemoryClient(target), (err) => err instanceof RequestInvalidError && err.reason === 'TARGET_EMPTY'
      && /give the server's HOST:PORT/.test(err.details));
  }
  new MemoryClient('', { members: { m1: '127.0.0.1:1' } }).close();
});

test('a lone surrogate is named where it is; a well-formed pair goes as it is', async () => {
  await assert.rejects(client.retain(TENANT, 'tea \ud83d\ude00 and \ud800'), (err) => {
    assert.ok(err instanceof RequestInvalidError);
    assert.match(err.details, /^text holds "\\ud800" \(a lone surrogate\) at 11/);
    return true;
  });
  const tenant = uniqueTenant();
  const stored = await client.retain(tenant, 'tea \ud83d\ude00');
  assert.equal((await client.getMemory(tenant, stored.memoryId)).text, 'tea \ud83d\ude00');
});

test('a whole number goes exactly, as a number, a BigInt or a decimal string', async () => {
  const tenant = uniqueTenant();
  await client.retain(tenant, 'tea');
  // 2**62 as a number is exact; String() would have sent 4611686018427388000.
  for (const id of [2 ** 62, 2n ** 62n, '4611686018427387904']) {
    await assert.rejects(client.getMemory(tenant, id), (err) => {
      assert.equal(err.reason, 'MEMORY_NOT_FOUND');
      assert.match(err.details, /memory 4611686018427387904 does not exist/);
      return true;
    });
  }
  assert.ok(Array.isArray(await client.recall(tenant, 'tea', { k: 3n })));
  const stored = await client.retain(tenant, 'coffee', { thread: { id: 's', position: 2n ** 53n - 1n } });
  assert.equal((await client.getMemory(tenant, stored.memoryId)).thread.position, String(2 ** 53 - 1));
});

test('a hot-path wait the server refuses is its answer, never a deadline grpc-js cannot send', async () => {
  for (const timeoutSeconds of [1e300, 2 ** 40, Infinity, NaN, -5]) {
    await assert.rejects(client.hotPath(TENANT, 'flush', { timeoutSeconds }), (err) => {
      assert.equal(err.code, grpc.status.INVALID_ARGUMENT, String(err));
      assert.equal(err.reason, 'TIMEOUT_INVALID');
      return true;
    });
  }
});

test('a change whose op is not put or delete is refused, never sent as a delete', async () => {
  const tenant = uniqueTenant();
  const { generation } = await client.updateWorkspace(tenant, 'w', [{ op: 'put', key: 'plan.md', content: 'the plan' }],
    { observedGeneration: 0 });
  for (const op of [undefined, 'remove', 'PUT', 'Delete', 'constructor']) {
    for (const write of [
      () => client.updateWorkspace(tenant, 'w', [{ op, key: 'plan.md' }], { observedGeneration: generation }),
      () => client.editRecords(tenant, 'workspace/w', [{ op, key: 'plan.md' }], generation),
    ]) {
      await assert.rejects(write(), (err) => {
        assert.equal(err.reason, 'CHANGE_OP_INVALID', `${op}: ${err}`);
        return true;
      });
    }
  }
  const { records } = await client.listRecords(tenant, 'workspace/w');
  assert.deepEqual(records, [{ key: 'plan.md', content: 'the plan' }]);
});

// Every method at once, from the class: an options object that is none (null threw JS's own
// "Cannot read properties of null"; a string or a number silently gave every option its default),
// and a required argument left null or undefined (a memory id of null read memory 0).
const { MemoryHost } = require('../src');

function publicMethods(cls) {
  return Object.getOwnPropertyNames(cls.prototype)
    .filter((name) => name !== 'constructor' && !name.startsWith('_') && typeof cls.prototype[name] === 'function');
}

async function outcomeOf(call) {
  try {
    const answer = call();
    if (answer && typeof answer[Symbol.asyncIterator] === 'function') await drained(answer);
    else await answer;
    return 'answered';
  } catch (err) {
    return err instanceof RequestInvalidError && err.reason === 'REQUEST_UNDECODABLE' ? err.details : `${err.name}: ${err.message}`;
  }
}

test('an options object that is none, or a required argument left out, is refused naming the method and argument', async () => {
  const host = new MemoryHost(client, TENANT);
  const wrong = [];
  let checked = 0;
  for (const [target, cls, except] of [[client, MemoryClient, ['close']], [host, MemoryHost, ['callTool']]]) {
    for (const name of publicMethods(cls).filter((n) => !except.includes(n))) {
      const method = target[name];
      const filled = Array.from({ length: method.length }, () => 'x');
      if (method.toString().match(/\{[^)]*\}\s*=\s*\{\}\s*\)/)) {
        for (const options of [null, 'k=3', 5, ['x']]) {
          checked += 1;
          const outcome = await outcomeOf(() => method.call(target, ...filled, options));
          if (!outcome.startsWith(`${name}: options is `)) wrong.push(`${name}(..., ${shown(options)}): ${outcome}`);
        }
      }
      for (let at = 0; at < method.length; at += 1) {
        for (const missing of [null, undefined]) {
          checked += 1;
          const args = filled.map((v, i) => (i === at ? missing : v));
          const outcome = await outcomeOf(() => method.call(target, ...args));
          if (!/^\w+: \w+ is (null|undefined); it is required$/.test(outcome)) wrong.push(`${name} argument ${at} ${missing}: ${outcome}`);
        }
      }
    }
  }
  assert.deepEqual(wrong, []);
  assert.ok(checked > 250, checked);
  await assert.rejects(client.getMemory(TENANT, null), { reason: 'REQUEST_UNDECODABLE', details: 'getMemory: memoryId is null; it is required' });
  await assert.rejects(client.recall(TENANT, 'tea', null), { details: 'recall: options is null; it takes an object of options, or nothing' });
  assert.throws(() => new MemoryClient(server.target, null), { details: 'MemoryClient: options is null; it takes an object of options, or nothing' });
  assert.throws(() => new MemoryHost(client, TENANT, 'x'), RequestInvalidError);
  // The client's own options: retries -1 tried no call, 1e9 retried for days, 'x' and 1.5 were taken.
  for (const [options, details] of [
    [{ retries: -1 }, 'MemoryClient: retries is -1; it takes a whole number from 0 to 100'],
    [{ retries: 1e9 }, 'MemoryClient: retries is 1000000000; it takes a whole number from 0 to 100'],
    [{ retries: 'x' }, 'MemoryClient: retries is "x"; it takes a whole number from 0 to 100'],
    [{ retries: 1.5 }, 'MemoryClient: retries is 1.5; it takes a whole number from 0 to 100'],
    [{ maxRetryDelayMs: -5 }, 'MemoryClient: maxRetryDelayMs is -5; it takes a whole number from 0 to 3600000'],
    // A retry window that never ends (NaN compares false, an infinity) or ends before it begins.
    [{ retryWindowMs: NaN }, 'MemoryClient: retryWindowMs is NaN; it takes a whole number from 0 to 3600000'],
    [{ retryWindowMs: Infinity }, 'MemoryClient: retryWindowMs is Infinity; it takes a whole number from 0 to 3600000'],
    [{ retryWindowMs: -1 }, 'MemoryClient: retryWindowMs is -1; it takes a whole number from 0 to 3600000'],
    [{ retryWindowMs: '15000' }, 'MemoryClient: retryWindowMs is "15000"; it takes a whole number from 0 to 3600000'],
    [{ sessionTenants: 0 }, 'MemoryClient: sessionTenants is 0; it takes a whole number from 1 to 9007199254740991'],
    [{ sessionConsistency: 'no' }, 'MemoryClient: sessionConsistency is a string; it takes true or false'],
  ]) {
    assert.throws(() => new MemoryClient(server.target, options), { details }, JSON.stringify(options));
  }
  const bounded = new MemoryClient(server.target, { retries: 100, maxRetryDelayMs: 0, sessionTenants: 1, sessionConsistency: false });
  assert.equal(bounded.retries, 100);
  bounded.close();
  // A flag that is no boolean, a number that is none: protobufjs sent 'no' as true.
  for (const [call, details] of [
    [() => client.retain(TENANT, 'tea', { fast: 'no' }), 'fast is a string; it takes true or false'],
    [() => client.dedup(TENANT, { threshold: '0.5' }), 'threshold is a string; it takes a number'],
    [() => client.listMemories(TENANT, { includeForgotten: 1 }), 'include_forgotten is a number; it takes true or false'],
  ]) {
    await assert.rejects(call(), { reason: 'REQUEST_UNDECODABLE', details });
  }
  assert.ok(!(await client.listTenants()).tenants.includes(TENANT));
});
