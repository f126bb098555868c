'use strict';
// The Node client against the real Python server: retain/recall round trip, and the error reason
// read from the google.rpc.ErrorInfo in the status details.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const grpc = require('@grpc/grpc-js');
const { MemoryClient, MnemosyneError } = require('../src');
const { startServer, uniqueTenant } = require('../test-support/support');

let server;
let client;
test.before(async () => {
  server = await startServer();
  client = new MemoryClient(server.target);
});
test.after(async () => {
  client?.close();
  await server?.stop();
});

test('retain then recall round trip', async () => {
  const tenant = uniqueTenant();
  const retained = await client.retain(tenant, 'The customer requested a refund, ticket number RF-88213');
  assert.equal(retained.status, 'created');
  assert.ok(BigInt(retained.memoryId) > 0n);
  const other = await client.retain(tenant, 'Lunch is at noon in the blue room');
  assert.equal(other.status, 'created');
  const hits = await client.recall(tenant, 'refund ticket', { k: 1 });
  assert.deepEqual(hits.map((h) => h.memory.id), [retained.memoryId]);
  assert.equal(hits[0].memory.text, 'The customer requested a refund, ticket number RF-88213');
  assert.ok(hits[0].memory.facts.some((f) => f.kind === 'identifier' && f.normalized === 'RF-88213'));
  const again = await client.retain(tenant, 'The customer requested a refund, ticket number RF-88213');
  assert.equal(again.status, 'duplicate');
  assert.equal(again.memoryId, retained.memoryId);
});

test('a conversation retained once is one memory whose text is the transcript; again, a duplicate', async () => {
  // The Node client had no retainConversation (nor retain a `messages` field): the Python client's
  // retain_conversation, with retain's options.
  const tenant = uniqueTenant();
  const messages = [{ role: 'User', content: 'I moved to Lisbon last week', name: 'Caroline' }, ['assistant', 'Welcome to Lisbon!']];
  const expiresAt = new Date(Date.UTC(2999, 0, 1));
  const retained = await client.retainConversation(tenant, messages, {
    scope: 'workspace/chats', metadata: { channel: 'web' }, occurredAt: new Date(Date.UTC(2026, 0, 2)), speaker: 'Caroline', expiresAt,
  });
  assert.equal(retained.status, 'created');
  const stored = await client.getMemory(tenant, retained.memoryId);
  assert.equal(stored.text, 'user (Caroline): I moved to Lisbon last week\nassistant: Welcome to Lisbon!');
  assert.deepEqual([stored.scope, stored.metadata, stored.speaker], ['workspace/chats', { channel: 'web' }, 'Caroline']);
  assert.deepEqual([stored.occurredAt, stored.expiresAt], [new Date(Date.UTC(2026, 0, 2)), expiresAt]);
  const again = await client.retainConversation(tenant, messages, { scope: 'workspace/chats' });
  assert.deepEqual([again.status, again.memoryId], ['duplicate', retained.memoryId]);
  assert.equal((await client.listMemories(tenant, { scope: 'workspace/chats' })).memories.length, 1);
  // The server's refusals, as the Python client gets them (no messages: the client's own).
  for (const [bad, reason] of [
    [[], 'MESSAGES_EMPTY'], [[['us:er', 'hi']], 'MESSAGE_ROLE_INVALID'], [[['user', '']], 'MESSAGE_EMPTY'],
    [Array.from({ length: 1001 }, () => ['user', 'hi']), 'MESSAGES_TOO_MANY'],
    // Left out is empty, as in proto3 and over the JSON API.
    [[{ content: 'hi' }], 'MESSAGE_ROLE_INVALID'], [[{ role: 'user', content: null }], 'MESSAGE_EMPTY'],
  ]) {
    await assert.rejects(client.retainConversation(tenant, bad), { code: grpc.status.INVALID_ARGUMENT, reason });
  }
});

test('an invalid request fails with its reason from the status details', async () => {
  await assert.rejects(client.retain(uniqueTenant(), '   '), (err) => {
    assert.ok(err instanceof MnemosyneError);
    assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(err.reason, 'TEXT_EMPTY');
    assert.equal(err.domain, 'mnemosyne.v1');
    return true;
  });
  await assert.rejects(client.retain('../etc/passwd', 'x'), (err) => err.code === grpc.status.INVALID_ARGUMENT && err.reason !== '');
});

/** A loopback port nothing listens on. */
async function freePort() {
  const probe = net.createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

test('the wrong port (nothing listening, an HTTP server): UNAVAILABLE asking whether a Mnemosyne server listens there', async () => {
  const web = http.createServer((request, response) => response.end('not gRPC'));
  await new Promise((resolve) => web.listen(0, '127.0.0.1', resolve));
  try {
    for (const target of [`127.0.0.1:${await freePort()}`, `127.0.0.1:${web.address().port}`]) {
      const wrong = new MemoryClient(target, { retries: 0, timeoutMs: 5000 });
      try {
        await assert.rejects(wrong.recall('acme', 'anything'), (err) => {
          assert.ok(err instanceof MnemosyneError);
          assert.equal(err.code, grpc.status.UNAVAILABLE); // what a program branches on is unchanged
          assert.equal(err.reason, '');
          assert.ok(err.message.startsWith(`UNAVAILABLE: is a Mnemosyne server listening at ${target}? (`), err.message);
          assert.ok(!err.message.includes('\n') && err.message.endsWith(`${err.cause.details})`), err.message);
          return true;
        });
      } finally {
        wrong.close();
      }
    }
  } finally {
    web.close();
  }
});

test('an assembled context larger than a response holds is read back whole, at one generation', async () => {
  const tenant = uniqueTenant();
  const record = '\u{1F600}'.repeat(262144 / 4); // the largest record: 262,144 bytes of four-byte characters
  const changes = Array.from({ length: 20 }, (_, i) => ({ op: 'put', key: `notes/${String(i).padStart(2, '0')}.md`, content: record }));
  const { generation } = await client.updateWorkspace(tenant, 'big', changes, { observedGeneration: 0n });
  const context = await client.assembleContext(tenant, 'big');
  assert.equal(context.workspaceGeneration, generation);
  assert.deepEqual(context.workspaceRecords.map((r) => r.key), changes.map((c) => c.key));
  assert.ok(context.workspaceRecords.every((r) => r.content === record));
  const { record: one, generation: at } = await client.getRecord(tenant, 'workspace/big', 'notes/07.md');
  assert.equal(one.content, record);
  assert.equal(at, generation);
});

test('when, where in a thread and who: retained and recalled', async () => {
  const tenant = uniqueTenant();
  const occurredAt = new Date(Date.UTC(2023, 4, 8, 13, 56));
  const retained = await client.retain(tenant, 'I went to a support group for the first time yesterday', {
    occurredAt, thread: { id: 'session-1', position: 3 }, speaker: 'Caroline',
  });
  assert.equal(retained.status, 'created');
  const [hit] = await client.recall(tenant, 'support group', { k: 1 });
  assert.equal(hit.memory.id, retained.memoryId);
  assert.equal(hit.memory.occurredAt.getTime(), occurredAt.getTime());
  assert.deepEqual(hit.memory.thread, { id: 'session-1', position: '3' });
  assert.equal(hit.memory.speaker, 'Caroline');
  const plain = await client.retain(tenant, 'Lunch is at noon');
  const [other] = await client.recall(tenant, 'lunch', { k: 1 });
  assert.equal(other.memory.id, plain.memoryId);
  assert.equal(other.memory.occurredAt, null);
  assert.equal(other.memory.thread, null);
  assert.equal(other.memory.speaker, '');
});

test('expiresAt on retain, retainBatch items and updateMemory: a past one hides the memory, a future one is read back', async () => {
  // Before, the client sent no expiry (the option was dropped): each memory took the tenant's
  // default, never, and none could be made to expire, or to stop expiring, from Node.
  const tenant = uniqueTenant();
  const past = new Date(Date.now() - 3600 * 1000);
  const future = new Date(Date.UTC(2100, 0, 1, 12, 30, 15, 250));
  const futureSeconds = Date.UTC(2101, 5, 1) / 1000 + 0.5; // unix seconds, as the Python client's expires_at
  const gone = await client.retain(tenant, 'In the village Ada keeps bees', { expiresAt: past });
  const kept = await client.retain(tenant, 'In the village Ben repairs bicycles', { expiresAt: future });
  const [goneItem, keptItem] = await client.retainBatch(tenant, [
    { text: 'In the village Cleo sings in the choir', expiresAt: Math.floor(past.getTime() / 1000) },
    { text: 'In the village Dan bakes rye bread', expiresAt: futureSeconds },
  ]);
  const updated = await client.retain(tenant, 'In the village Eve paints lighthouses');
  assert.equal(updated.status, 'created');
  const hidden = await client.updateMemory(tenant, updated.memoryId, { expiresAt: past });
  assert.equal(hidden.memory.expiresAt.getTime(), past.getTime());
  const recalled = async () => new Map((await client.recall(tenant, 'village', { k: 10 })).map((h) => [h.memory.id, h.memory]));
  let hits = await recalled();
  assert.deepEqual([...hits.keys()].sort(), [kept.memoryId, keptItem.memoryId].sort());
  assert.equal(hits.get(kept.memoryId).expiresAt.getTime(), future.getTime());
  assert.equal(hits.get(keptItem.memoryId).expiresAt.getTime(), futureSeconds * 1000);
  // An expired memory in its grace is still read by id, with its expiry.
  assert.equal((await client.getMemory(tenant, gone.memoryId)).expiresAt.getTime(), past.getTime());
  assert.equal((await client.getMemory(tenant, goneItem.memoryId)).expiresAt.getTime(), Math.floor(past.getTime() / 1000) * 1000);
  // As in the Python client: clearExpiresAt makes it never expire, a later expiresAt moves it;
  // either shows it again. Both at once is the server's EXPIRES_AT_CONFLICT.
  const cleared = await client.updateMemory(tenant, updated.memoryId, { clearExpiresAt: true });
  assert.equal(cleared.memory.expiresAt, null);
  const moved = await client.updateMemory(tenant, gone.memoryId, { expiresAt: futureSeconds });
  assert.equal(moved.memory.expiresAt.getTime(), futureSeconds * 1000);
  hits = await recalled();
  assert.deepEqual([...hits.keys()].sort(), [gone.memoryId, kept.memoryId, keptItem.memoryId, updated.memoryId].sort());
  assert.equal(hits.get(updated.memoryId).expiresAt, null);
  await assert.rejects(client.updateMemory(tenant, kept.memoryId, { expiresAt: future, clearExpiresAt: true }),
    (err) => err instanceof MnemosyneError && err.code === grpc.status.INVALID_ARGUMENT && err.reason === 'EXPIRES_AT_CONFLICT');
});

test('a bad time or speaker is refused with its reason', async () => {
  await assert.rejects(client.retain(uniqueTenant(), 'x', { occurredAt: new Date('not a date') }),
    { name: 'RequestInvalidError', reason: 'OCCURRED_AT_INVALID' });
  // A wrong type is REQUEST_UNDECODABLE, as the Python client's (it was OCCURRED_AT_INVALID);
  // unix seconds are a time, as the Python client's occurred_at.
  await assert.rejects(client.retain(uniqueTenant(), 'x', { occurredAt: 'yesterday' }),
    { name: 'RequestInvalidError', reason: 'REQUEST_UNDECODABLE', details: 'occurredAt is a string; it takes a Date or a number of unix seconds' });
  const tenant = uniqueTenant();
  const said = await client.retain(tenant, 'I moved to Lisbon', { occurredAt: 1767312000.25 });
  assert.deepEqual((await client.getMemory(tenant, said.memoryId)).occurredAt, new Date(1767312000250));
  // expiresAt takes unix seconds too, refused in the Python client's words; the range's edges go.
  await assert.rejects(client.retain(uniqueTenant(), 'x', { expiresAt: 253402300800 }), (err) => err.reason === 'EXPIRES_AT_INVALID'
    && err.details === 'expiresAt is 253402300800 unix seconds; a time is between -62135596800 (0001-01-01T00:00:00Z) '
      + 'and 253402300800 (10000-01-01T00:00:00Z, excluded)');
  const edges = await client.retainBatch(uniqueTenant(), [
    { text: 'first', expiresAt: -62135596800 }, { text: 'last', expiresAt: 253402300799.9999 },
  ]);
  assert.deepEqual(edges.map((r) => r.status), ['created', 'created']);
  await assert.rejects(client.retain(uniqueTenant(), 'x', { speaker: 'Ca\u0000roline' }), (err) => {
    assert.ok(err instanceof MnemosyneError);
    assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(err.reason, 'SPEAKER_INVALID');
    return true;
  });
});

test('an option given null takes its default, as an undefined one does and as the Python client\'s None', async () => {
  // Destructuring defaults only undefined: {requestId: null} sent no request id (the write was then
  // never retried) and {metadata: null} cleared the memory's metadata, where None keeps it.
  const tenant = uniqueTenant();
  const requestIds = [];
  const call = client._call;
  client._call = function recording(stub, method, request, ...rest) {
    requestIds.push(request.request_id);
    return call.call(this, stub, method, request, ...rest);
  };
  try {
    const retained = await client.retain(tenant, 'Ada takes the night train', {
      metadata: { topic: 'travel' }, requestId: null, scope: null, fast: null, occurredAt: null, speaker: null,
    });
    assert.equal(retained.status, 'created');
    const updated = await client.updateMemory(tenant, retained.memoryId, { text: 'Ada takes the morning train', metadata: null, requestId: null });
    assert.deepEqual(updated.memory.metadata, { topic: 'travel' });
    const hits = await client.recall(tenant, 'train', { k: null, consistencyToken: null });
    assert.equal(hits[0].memory.text, 'Ada takes the morning train');
  } finally {
    client._call = call;
  }
  assert.equal(requestIds.length, 3);
  assert.ok(requestIds.slice(0, 2).every((id) => typeof id === 'string' && id.length > 0), JSON.stringify(requestIds));
});
