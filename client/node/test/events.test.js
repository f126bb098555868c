'use strict';
// HotPathService and EventsService from Node against the real Python server: a fast write is
// queued, flushed, and then readable as its event (GetEvent, ListEvents) and as its transitions
// (WatchEvents, resumable by sequence); failures carry their reasons.
const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { MemoryClient, MemoryHost, MnemosyneError } = require('../src');
const { startServer, uniqueTenant } = require('../test-support/support');

let server;
let client;
test.before(async () => {
  // Limits lower than the defaults of any client: a call that names no k or page size must get
  // the server's default within them (the last test), never a refusal of a number it did not give.
  server = await startServer({ args: ['--max-k', '3', '--max-page-size', '3'] });
  client = new MemoryClient(server.target);
});
test.after(async () => {
  client?.close();
  await server?.stop();
});

async function collect(iterable, until) {
  const seen = [];
  for await (const e of iterable) {
    seen.push(e);
    if (until(e)) break; // leaving the loop cancels the stream
  }
  return seen;
}

test('hot path: enable, a fast retain is enqueued, flush, then its event says what it created', async () => {
  const tenant = uniqueTenant();
  const before = await client.hotPath(tenant, 'status');
  assert.equal(before.enabled, false);
  assert.equal((await client.hotPath(tenant, 'enable')).enabled, true);
  const started = new Date(Date.now() - 1000);
  const queued = await client.retain(tenant, 'Invoice INV-4242 was paid by wire transfer', { fast: true });
  assert.equal(queued.status, 'enqueued');
  assert.ok(BigInt(queued.eventId) > 0n);
  // The barrier covers what is still queued when it arrives (0 if a worker already finished the
  // write); either way, after it the write's event has succeeded.
  const flushed = await client.hotPath(tenant, 'flush', { timeoutSeconds: 20 });
  assert.ok(flushed.flushed <= 1, JSON.stringify(flushed));
  assert.deepEqual(flushed, { flushed: flushed.flushed, succeeded: flushed.flushed, failed: 0, failedEventIds: [] });

  const event = await client.getEvent(tenant, queued.eventId);
  assert.equal(event.eventId, queued.eventId);
  assert.equal(event.status, 'succeeded');
  assert.equal(event.kind, 'retain');
  assert.equal(event.createdMemoryIds.length, 1);
  assert.ok(event.acceptedAt instanceof Date && event.acceptedAt >= started);
  assert.ok(event.finishedAt instanceof Date && event.finishedAt >= event.acceptedAt);
  const hits = await client.recall(tenant, 'INV-4242', { k: 1 });
  assert.deepEqual(hits.map((h) => h.memory.id), event.createdMemoryIds);

  const page = await client.listEvents(tenant);
  assert.deepEqual(page.events.map((e) => e.eventId), [queued.eventId]);
  assert.equal(page.nextPageToken, '');
  assert.deepEqual((await client.listEvents(tenant, { status: 'succeeded', acceptedAfter: started })).events.map((e) => e.eventId), [queued.eventId]);
  assert.deepEqual((await client.listEvents(tenant, { status: 'failed' })).events, []);
  assert.deepEqual((await client.listEvents(tenant, { acceptedAfter: new Date(Date.now() + 60000) })).events, []);

  const after = await client.hotPath(tenant, 'status');
  assert.deepEqual([after.enabled, after.queueDepth, after.accepted, after.succeeded], [true, 0, 1, 1]);
  const disabled = await client.hotPath(tenant, 'disable');
  assert.equal(disabled.enabled, false);
  assert.equal((await client.retain(tenant, 'Written synchronously now', { fast: true })).status, 'created');
});

test('watchEvents replays every transition and resumes exactly after a sequence', async () => {
  const tenant = uniqueTenant();
  await client.hotPath(tenant, 'enable');
  const done = (id) => (e) => e.eventId === id && e.status === 'succeeded';
  const first = await client.retain(tenant, 'Parcel PX-1 left the depot', { fast: true });
  await client.hotPath(tenant, 'flush');
  const seen = await collect(client.watchEvents(tenant, { timeoutMs: 20000 }), done(first.eventId));
  assert.deepEqual(seen.map((e) => [e.eventId, e.status]),
    [[first.eventId, 'pending'], [first.eventId, 'running'], [first.eventId, 'succeeded']]);
  const sequences = seen.map((e) => BigInt(e.sequence));
  assert.ok(sequences[0] > 0n && sequences[0] < sequences[1] && sequences[1] < sequences[2], String(sequences));

  // A second write after the stream was dropped: resuming after the last sequence received
  // yields exactly its transitions, none of the first's again.
  const second = await client.retain(tenant, 'Parcel PX-2 left the depot', { fast: true });
  await client.hotPath(tenant, 'flush');
  const resumed = await collect(client.watchEvents(tenant, { afterSequence: seen.at(-1).sequence, timeoutMs: 20000 }),
    done(second.eventId));
  assert.deepEqual(resumed.map((e) => [e.eventId, e.status]),
    [[second.eventId, 'pending'], [second.eventId, 'running'], [second.eventId, 'succeeded']]);
  assert.ok(BigInt(resumed[0].sequence) > sequences[2]);
  // Only events after an id.
  const later = await collect(client.watchEvents(tenant, { afterEventId: first.eventId, timeoutMs: 20000 }), done(second.eventId));
  assert.deepEqual(later.map((e) => e.sequence), resumed.map((e) => e.sequence));
});

test('a watch that outlives its deadline fails with DEADLINE_EXCEEDED', async () => {
  const tenant = uniqueTenant();
  await client.hotPath(tenant, 'enable');
  await assert.rejects(collect(client.watchEvents(tenant, { timeoutMs: 300 }), () => false), (err) => {
    assert.ok(err instanceof MnemosyneError);
    assert.equal(err.code, grpc.status.DEADLINE_EXCEEDED);
    return true;
  });
});

test('events and hot path failures carry their reasons', async () => {
  const tenant = uniqueTenant();
  await client.retain(tenant, 'The tenant exists now');
  await assert.rejects(client.getEvent(tenant, 999), (err) => {
    assert.ok(err instanceof MnemosyneError);
    assert.equal(err.code, grpc.status.NOT_FOUND);
    assert.equal(err.reason, 'EVENT_NOT_FOUND');
    return true;
  });
  await assert.rejects(client.hotPath(tenant, 'drain'), { name: 'RequestInvalidError', reason: 'HOT_PATH_ACTION_INVALID' });
  await assert.rejects(client.listEvents(tenant, { status: 'done' }), { name: 'RequestInvalidError', reason: 'EVENT_STATUS_INVALID' });
  await assert.rejects(client.hotPath('../etc', 'status'), (err) => err.code === grpc.status.INVALID_ARGUMENT && err.reason !== '');
});

test('a call naming no k or page size gets the server default within its lower --max-k and --max-page-size', async () => {
  const tenant = uniqueTenant();
  await client.hotPath(tenant, 'enable');
  await client.retainBatch(tenant, ['Parcel PX-11 left', 'Parcel PX-12 left', 'Parcel PX-13 left', 'Parcel PX-14 left'], { fast: true });
  await client.hotPath(tenant, 'flush', { timeoutSeconds: 20 });
  assert.equal((await client.recall(tenant, 'parcel left')).length, 3);
  assert.equal((await client.listMemories(tenant)).memories.length, 3);
  const events = await client.listEvents(tenant);
  assert.ok(events.events.length === 3 && events.nextPageToken !== '', JSON.stringify(events));
  assert.equal((await client.assembleContext(tenant, 'main', { query: 'parcel left' })).memories.length, 3);
  assert.match(await new MemoryHost(client, tenant).assembleContext({}, 'main', { query: 'parcel left' }), /PX-1/);
  await assert.rejects(client.recall(tenant, 'parcel', { k: 4 }), { reason: 'K_OUT_OF_RANGE' });
});
