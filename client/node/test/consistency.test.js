'use strict';
// Session consistency by default (docs/polyglot.md): the Node client reads its own fast write at
// once, queued behind a backlog the server's workers hold (the test seam
// MNEMOSYNE_TEST_HOLD_BACKLOG: they take only the writes a read waits for); opting out, per
// client or per read, the read misses it; the host's assembled context has it; a token refused
// for good is its typed error and the client drops it.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  MemoryClient, MemoryHost, MnemosyneError, TokenInvalidError, TokenForeignError,
} = require('../src');
const { startServer, uniqueTenant } = require('../test-support/support');

const BACKLOG = 300;
let server;
let client;
let plain;
const hold = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'mnemosyne-hold-')), 'backlog');
test.before(async () => {
  fs.writeFileSync(hold, '');
  server = await startServer({ env: { MNEMOSYNE_TEST_HOLD_BACKLOG: hold } });
  client = new MemoryClient(server.target);
  plain = new MemoryClient(server.target, { sessionConsistency: false });
});
test.after(async () => {
  client?.close();
  plain?.close();
  await server?.stop();
  fs.rmSync(path.dirname(hold), { recursive: true, force: true });
});

/** A tenant with its hot path on and BACKLOG fast writes queued by a client without a session. */
async function tenantWithBacklog() {
  const tenant = uniqueTenant();
  await plain.hotPath(tenant, 'enable');
  for (let start = 0; start < BACKLOG; start += 50) {
    const writes = [];
    for (let i = start; i < start + 50; i += 1) {
      writes.push(plain.retain(tenant, `Crate C-${String(i % 100).padStart(4, '0')} sits on shelf ${i % 7}`, { fast: true }));
    }
    for (const written of await Promise.all(writes)) assert.equal(written.status, 'enqueued');
  }
  return tenant;
}

test('the default client reads its own fast write at once; the opt-outs miss it', async () => {
  const tenant = await tenantWithBacklog();
  const fact = 'The loading dock key hangs in locker L-4417';
  assert.equal((await client.retain(tenant, fact, { fast: true })).status, 'enqueued');
  assert.deepEqual(await plain.recall(tenant, 'loading dock key locker L-4417'), []);
  assert.deepEqual(await client.recall(tenant, 'loading dock key locker L-4417', { consistencyToken: '' }), []);
  const hits = await client.recall(tenant, 'loading dock key locker L-4417', { k: 1 });
  assert.deepEqual(hits.map((h) => h.memory.text), [fact]);

  const second = 'The spare forklift battery charges in bay B-2209';
  await client.retain(tenant, second, { fast: true });
  const token = client.consistencyToken(tenant);
  assert.ok(token, 'a fast write returns a token, kept by the client');
  assert.deepEqual(await plain.recall(tenant, 'spare forklift battery bay B-2209'), []);
  const handed = await plain.recall(tenant, 'spare forklift battery bay B-2209', { k: 1, consistencyToken: token });
  assert.deepEqual(handed.map((h) => h.memory.text), [second]);
  assert.ok((await plain.hotPath(tenant, 'status')).queueDepth >= BACKLOG, 'the backlog is still queued');
});

test('the host assembles a context with its own fast write', async () => {
  const tenant = await tenantWithBacklog();
  const host = new MemoryHost(client, tenant);
  const agent = {};
  await client.retain(tenant, "The tenant's escalation contact is Priya Raman", { fast: true });
  const optedOut = await host.assembleContext(agent, 'main', { query: 'escalation contact', k: 3, consistencyToken: '' });
  assert.doesNotMatch(optedOut, /Priya Raman/);
  assert.match(await host.assembleContext(agent, 'main', { query: 'escalation contact', k: 3 }), /Priya Raman/);
});

test('a client that erased or imported over a tenant reads it at once, its tokens dropped', async () => {
  const tenant = await tenantWithBacklog();
  await client.retain(tenant, 'Written before the export');
  let manifest = null;
  const chunks = [];
  for await (const part of client.exportTenant(tenant)) {
    if (part.manifest) manifest = part.manifest;
    else chunks.push(part.chunk);
  }
  await client.retain(tenant, 'Queued before the import', { fast: true });
  assert.ok(client.consistencyToken(tenant));
  await client.importTenant(manifest, chunks, { replace: true });
  assert.equal(client.consistencyToken(tenant), null);
  const hits = await client.recall(tenant, 'written before the export', { k: 1 });
  assert.deepEqual(hits.map((h) => h.memory.text), ['Written before the export']);

  await plain.hotPath(tenant, 'enable');
  await plain.retain(tenant, 'A backlog write', { fast: true });
  await client.retain(tenant, 'Queued before the erasure', { fast: true });
  assert.ok(client.consistencyToken(tenant));
  await client.eraseTenant(tenant);
  assert.equal(client.consistencyToken(tenant), null);
  assert.deepEqual(await client.recall(tenant, 'queued before the erasure'), []);
});

test('a foreign or forged token is its typed error', async () => {
  const mine = uniqueTenant();
  await client.hotPath(mine, 'enable');
  await client.retain(mine, 'A note of my own', { fast: true });
  const token = client.consistencyToken(mine);
  assert.ok(token);
  await assert.rejects(client.recall(uniqueTenant(), 'note', { consistencyToken: token }), (err) => {
    assert.ok(err instanceof TokenForeignError && err instanceof MnemosyneError);
    assert.equal(err.name, 'TokenForeignError');
    assert.equal(err.reason, 'TOKEN_FOREIGN');
    return true;
  });
  await assert.rejects(client.recall(mine, 'note', { consistencyToken: `${token.slice(0, -4)}AAAA` }),
    (err) => err instanceof TokenInvalidError && err.reason === 'TOKEN_INVALID');
  assert.equal(client.consistencyToken(mine), token, "the caller's own token: the session keeps its own");
});

test('writes in flight at once are all read: each read waits for every one of them', async () => {
  const tenant = await tenantWithBacklog();
  const facts = [0, 1, 2, 3, 4, 5].map((n) => `Courier ${n} parked its van in space P-${String(n).padStart(3, '0')}`);
  await Promise.all(facts.map((fact) => client.retain(tenant, fact, { fast: true })));
  for (const [n, fact] of facts.entries()) {
    const hits = await client.recall(tenant, `van parked in space P-${String(n).padStart(3, '0')}`, { k: 10 });
    assert.ok(hits.map((h) => h.memory.text).includes(fact), fact);
  }
  assert.ok((await plain.hotPath(tenant, 'status')).queueDepth >= BACKLOG, 'the backlog is still queued');
});
