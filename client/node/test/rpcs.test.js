'use strict';
// The methods of the RPCs the Node client did not call before (issue 44), each against the real
// Python server: tests/test_docs.py fails for an RPC without a method in either client; here each
// method is shown to reach its RPC and to convert what comes back.
const test = require('node:test');
const assert = require('node:assert/strict');
const { MemoryClient, MnemosyneError } = require('../src');
const { startServer, uniqueTenant } = require('../test-support/support');

let server;
let client;
test.before(async () => {
  server = await startServer(); // no tokens, on loopback: every call is an admin's
  client = new MemoryClient(server.target);
});
test.after(async () => {
  client?.close();
  await server?.stop();
});

test('memories: batch, get, list, update and its versions, forget by id and by filter', async () => {
  const tenant = uniqueTenant();
  const results = await client.retainBatch(tenant, [
    'Invoice INV-1 was paid by wire',
    { text: 'Invoice INV-2 is overdue', metadata: { kind: 'invoice' } },
    { text: 'Invoice INV-3 is overdue too', metadata: { kind: 'invoice' } },
  ]);
  assert.deepEqual(results.map((r) => r.status), ['created', 'created', 'created']);
  const first = await client.getMemory(tenant, results[0].memoryId);
  assert.equal(first.text, 'Invoice INV-1 was paid by wire');
  const page = await client.listMemories(tenant, { newestFirst: true, pageSize: 2 });
  assert.deepEqual(page.memories.map((m) => m.id), [results[2].memoryId, results[1].memoryId]);
  assert.ok(page.nextPageToken);
  const updated = await client.updateMemory(tenant, results[0].memoryId, { text: 'Invoice INV-1 was paid by card' });
  assert.equal(updated.updated, true);
  assert.equal(updated.memory.text, 'Invoice INV-1 was paid by card');
  const versions = await client.listMemoryVersions(tenant, results[0].memoryId);
  assert.deepEqual(versions.map((v) => [v.text, v.current]),
    [['Invoice INV-1 was paid by wire', false], ['Invoice INV-1 was paid by card', true]]);
  assert.ok(versions[0].at instanceof Date);
  // Metadata given replaces the memory's (it used to be sent without replace_metadata: dropped).
  const tagged = await client.updateMemory(tenant, results[0].memoryId, { metadata: { kind: 'receipt' } });
  assert.deepEqual(tagged.memory.metadata, { kind: 'receipt' });
  const retexted = await client.updateMemory(tenant, results[0].memoryId, { text: 'Invoice INV-1 was paid in cash' });
  assert.deepEqual(retexted.memory.metadata, { kind: 'receipt' });
  assert.equal(await client.forgetMemories(tenant, { kind: 'invoice' }), 2);
  assert.equal(await client.forget(tenant, results[0].memoryId), true);
  assert.equal(await client.forget(tenant, results[0].memoryId), false);
  assert.deepEqual((await client.listMemories(tenant)).memories, []);
});

test('records: list, edit at a generation, consolidate once, list scopes, consolidate sessions', async () => {
  const tenant = uniqueTenant();
  const edited = await client.editRecords(tenant, 'workspace/w', [{ op: 'put', key: 'a.md', content: 'A' }], 0n);
  assert.equal(typeof edited, 'bigint');
  await assert.rejects(client.editRecords(tenant, 'workspace/w', [{ op: 'put', key: 'b.md', content: 'B' }], 0n),
    (err) => err instanceof MnemosyneError && err.reason === 'GENERATION_MISMATCH');
  const change = [{ op: 'put', key: 'b.md', content: 'B' }];
  const once = await client.consolidate(tenant, 'workspace/w', change, edited, 'receipt-1');
  const again = await client.consolidate(tenant, 'workspace/w', change, edited, 'receipt-1');
  assert.equal(once.alreadyApplied, false);
  assert.deepEqual(again, { generation: once.generation, alreadyApplied: true });
  const listed = await client.listRecords(tenant, 'workspace/w');
  assert.deepEqual(listed, { records: [{ key: 'a.md', content: 'A' }, { key: 'b.md', content: 'B' }], generation: once.generation });
  const scopes = await client.listScopes(tenant);
  assert.deepEqual(scopes.find((s) => s.scope === 'workspace/w'), { scope: 'workspace/w', generation: once.generation, records: 2 });
  await client.retain(tenant, 'Dana prefers e-mail', { thread: { id: 'call-1', position: 0 }, speaker: 'Dana' });
  const outcomes = await client.consolidateSession(tenant, { thread: 'call-1' });
  assert.ok(Array.isArray(outcomes));
  for (const o of outcomes) assert.ok(['applied', 'already_applied', 'nothing_new', 'gave_up'].includes(o.outcome), o.outcome);
});

test('administration: ping, whoAmI, integrity, dedup, tenants, aggregate stats, erase', async () => {
  const tenant = uniqueTenant();
  await client.retain(tenant, 'The parcel PX-9 arrived on Monday');
  await client.retain(tenant, 'The parcel PX-9 arrived on Monday morning');
  await client.ping();
  const me = await client.whoAmI();
  assert.equal(me.admin, true);
  const report = await client.verifyIntegrity(tenant);
  assert.equal(report.valid, true);
  assert.equal(report.checked, 2);
  const dedup = await client.dedup(tenant, { threshold: 0.5 });
  assert.equal(dedup.merged, false);
  assert.ok(Array.isArray(dedup.groups));
  const tenants = await client.listTenants({ pageSize: 1000 });
  assert.ok(tenants.tenants.includes(tenant));
  const stats = await client.aggregateStats();
  assert.ok(stats.tenants[tenant]);
  assert.match(stats.consistency, /not one snapshot/);
  const receipt = await client.eraseTenant(tenant);
  assert.equal(receipt.tenant, tenant);
  assert.ok(!(await client.listTenants({ pageSize: 1000 })).tenants.includes(tenant));
});

test('reembedTenant: a tenant moved to another embedder step by step, then nothing left to do', async () => {
  const tenant = uniqueTenant();
  await client.retainBatch(tenant, ['The ferry leaves at noon', 'The bakery opens at seven']);
  // On hashing first (the server's embedder may be either), then to MiniLM one memory a step:
  // a chunk of one, then the switch, which embeds the last chunk itself.
  while (!(await client.reembedTenant(tenant, 'hashing')).finished);
  assert.deepEqual(await client.reembedTenant(tenant, 'minilm', { chunkSize: 1 }),
    { embedder: 'minilm', done: 1, total: 2, finished: false, switched: 0 });
  assert.deepEqual(await client.reembedTenant(tenant, 'minilm', { chunkSize: 1 }),
    { embedder: 'minilm', done: 2, total: 2, finished: true, switched: 2 });
  assert.equal((await client.reembedTenant(tenant, 'minilm')).switched, 0);
  assert.equal((await client.verifyIntegrity(tenant)).valid, true);
  await assert.rejects(client.reembedTenant(tenant, 'word2vec'),
    (err) => err instanceof MnemosyneError && err.reason === 'EMBEDDER_UNKNOWN');
});

test('lifecycle: backup and export streams, import under another name, moves refused on one server', async () => {
  const tenant = uniqueTenant();
  await client.retain(tenant, 'A memory that moves');
  const kinds = [];
  for await (const part of client.backup({ tenants: [tenant] })) kinds.push(part.part);
  assert.equal(kinds[0], 'tenant');
  assert.equal(kinds.at(-1), 'summary');
  assert.ok(kinds.includes('chunk'));
  let manifest = null;
  const chunks = [];
  for await (const part of client.exportTenant(tenant)) {
    if (part.manifest) manifest = part.manifest;
    else chunks.push(part.chunk);
  }
  assert.equal(manifest.tenant, tenant);
  const copy = uniqueTenant();
  const imported = await client.importTenant(manifest, chunks, { tenant: copy });
  assert.deepEqual([imported.tenant, imported.memories, imported.replaced], [copy, 1, false]);
  assert.equal((await client.listMemories(copy)).memories[0].text, 'A memory that moves');
  // The caller's own chunks failing midway (the file they are read from gone): the import is
  // cancelled and rejects with that very error, nothing installed (as the Python client's).
  const gone = new Error('the archive went');
  async function* failing() { yield chunks[0]; throw gone; }
  const never = uniqueTenant();
  await assert.rejects(client.importTenant(manifest, failing(), { tenant: never }), (err) => err === gone);
  await assert.rejects((async () => { for await (const part of client.exportTenant(never)) void part; })(),
    (err) => err instanceof MnemosyneError && err.reason === 'TENANT_NOT_FOUND');
  // One server is no deployment of members: the move RPCs are reached and refuse with a reason.
  await assert.rejects(client.moveTenant(tenant, 'm1'), (err) => err instanceof MnemosyneError && err.reason === 'NO_MEMBERS');
  await assert.rejects(client.activateTenant(tenant, 2, 'x'), (err) => err instanceof MnemosyneError && err.reason !== '');
});

test('webhooks: create, list, rotate, resume, its delivery log, delete', async () => {
  const tenant = uniqueTenant();
  const { webhook, secrets } = await client.createWebhook(tenant, 'https://hooks.example.com/in', ['memory.created', 'fast_write.failed']);
  assert.deepEqual([...webhook.kinds].sort(), ['fast_write.failed', 'memory.created']);
  assert.equal(secrets.length, 1);
  assert.ok(secrets[0].startsWith('whsec_'));
  assert.deepEqual((await client.listWebhooks(tenant)).map((w) => w.id), [webhook.id]);
  const rotated = await client.rotateWebhookSecret(tenant, webhook.id, { retireSecretIds: [webhook.secrets[0].id] });
  assert.equal(rotated.secrets.length, 1);
  assert.equal(rotated.webhook.secrets.length, 1);
  assert.notEqual(rotated.webhook.secrets[0].id, webhook.secrets[0].id);
  assert.equal((await client.resumeWebhook(tenant, webhook.id)).pausedAt, null);
  await client.retain(tenant, 'Locker L-4 holds the spare badge');
  const log = await client.listWebhookDeliveries(tenant, webhook.id);
  assert.deepEqual(log.deliveries.map((d) => d.kind), ['memory.created']);
  assert.equal(await client.deleteWebhook(tenant, webhook.id), true);
  assert.equal(await client.deleteWebhook(tenant, webhook.id), false);
  await assert.rejects(client.createWebhook(tenant, 'https://hooks.example.com/in', ['memory.made']),
    { name: 'RequestInvalidError', reason: 'WEBHOOK_KINDS_INVALID' });
});

test('revisions and expiry: list and revert a memory and a record, the expiry policy', async () => {
  const tenant = uniqueTenant();
  const [first] = await client.retainBatch(tenant, ['Desk D-7 is by the window']);
  await client.updateMemory(tenant, first.memoryId, { text: 'Desk D-7 is by the door' });
  const revisions = await client.listMemoryRevisions(tenant, first.memoryId);
  assert.deepEqual(revisions.map((r) => [r.revision, r.kind, r.text]),
    [[1, 'retained', 'Desk D-7 is by the window'], [2, 'updated', 'Desk D-7 is by the door']]);
  assert.equal(revisions[0].surface, 'grpc');
  const reverted = await client.revertMemory(tenant, first.memoryId, 1);
  assert.equal(reverted.memory.text, 'Desk D-7 is by the window');
  assert.equal(reverted.revision, 3);
  const g1 = await client.editRecords(tenant, 'workspace/w', [{ op: 'put', key: 'a.md', content: 'one' }], 0n);
  const g2 = await client.editRecords(tenant, 'workspace/w', [{ op: 'put', key: 'a.md', content: 'two' }], g1);
  const listed = await client.listRecordRevisions(tenant, 'workspace/w', 'a.md');
  assert.deepEqual(listed.revisions.map((r) => r.content), ['one', 'two']);
  assert.equal(listed.generation, g2);
  const g3 = await client.revertRecord(tenant, 'workspace/w', 'a.md', g1, g2);
  assert.ok(g3 > g2);
  await assert.rejects(client.revertRecord(tenant, 'workspace/w', 'a.md', g1, g2),
    (err) => err instanceof MnemosyneError && err.reason === 'GENERATION_MISMATCH');
  assert.deepEqual(await client.setExpiryPolicy(tenant, { defaultTtlSeconds: 3600, updateExtends: true }),
    { defaultTtlSeconds: 3600, updateExtends: true, graceSeconds: 7 * 86400 });
  assert.equal((await client.getExpiryPolicy(tenant)).defaultTtlSeconds, 3600);
});

test('figures: a tenant\'s last hour, and the tenants across the server', async () => {
  const tenant = uniqueTenant();
  await client.retainBatch(tenant, ['Shelf S-1 holds the manuals', 'Shelf S-2 holds the cables']);
  await client.recall(tenant, 'manuals shelf');
  const figures = await client.tenantFigures(tenant);
  assert.equal(figures.minutes.reduce((n, m) => n + m.writes, 0), 2);
  assert.equal(figures.minutes.reduce((n, m) => n + m.recalls, 0), 1);
  assert.ok(figures.fileBytes > 0);
  assert.ok(figures.countingSince instanceof Date);
  const across = await client.listTenantFigures({ limit: 100 });
  assert.ok(across.busiest.some((row) => row.tenant === tenant && row.writes === 2));
});

