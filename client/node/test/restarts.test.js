'use strict';
// The Node client across a restart of the real Python server (SIGKILL, then the server started
// again on the same port and data directory, as a Kubernetes pod's restart): a call safe to
// repeat is tried again within the retry window (src/retry_window.js) and answered by the server
// back; a call not safe to repeat is not sent again; a server that stays gone fails the call
// within the window. Before, the client gave up after 3 retries, 0.7 s. The Python client's
// tests/test_client_restarts.py.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const grpc = require('@grpc/grpc-js');
const { MemoryClient } = require('../src');
const { ownerOf } = require('../src/routing');
const { startServer } = require('../test-support/support');

const DOWN_MS = 2000; // from the death to the start again (which takes about a second more)

/**
 * `body(first, client, start)`: a server started with `options` on a data directory of its own,
 * a client of it, and `start(options)` to start it again there; all ended, and the directory
 * removed, when `body` has run.
 */
async function withServer(options, body) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'mnemosyne-node-restart-'));
  const started = [];
  const start = async (more) => {
    const server = await startServer({ dataDir, ...more });
    started.push(server);
    return server;
  };
  let client = null;
  try {
    const first = await start(options);
    client = new MemoryClient(first.target);
    await body(first, client, start);
  } finally {
    client?.close();
    for (const server of started) await server.kill();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/** `server` started again on its port `DOWN_MS` after it ended: the calls are made meanwhile. */
async function restarted(server, start) {
  await server.exited;
  await sleep(DOWN_MS);
  return start({ port: server.port });
}

const isUnavailable = (err) => err.code === grpc.status.UNAVAILABLE;

/** A loopback port nothing listens on (a member's, named in the member list before it starts). */
async function freePort() {
  const probe = net.createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

test('a retain whose reply a crash lost is answered by the server back and applied once', async () => {
  await withServer({ env: { MNEMOSYNE_TEST_CRASH_AFTER_COMMIT: 'retain' } }, async (first, client, start) => {
    const back = restarted(first, start);
    const began = Date.now();
    const result = await client.retain('acme', 'Invoice INV-4471 was paid on Friday', { requestId: 'across-a-restart' });
    const waited = Date.now() - began;
    await back;
    assert.deepEqual([result.status, result.memoryId], ['created', '1']);
    assert.ok(waited >= DOWN_MS && waited < 15000, `answered after ${waited} ms`);
    const stats = await client.stats('acme');
    assert.deepEqual([Number(stats.memories), Number(stats.writes), Number(stats.duplicates)], [1, 1, 0]);
  });
});

test('calls made while the server is down are answered by it once back; the unsafe one is not resent', async () => {
  await withServer({}, async (first, client, start) => {
    await client.retain('acme', 'The staging database moved to host db-7');
    await client.retain('kept', 'A tenant an erasure sent while the server was down must not erase');
    await first.kill();
    const back = restarted(first, start);
    const began = Date.now();
    await assert.rejects(client.eraseTenant('kept'), isUnavailable);
    assert.ok(Date.now() - began < 1000, 'an erasure is not tried again');
    const hits = await client.recall('acme', 'staging database host');
    const recalled = Date.now() - began;
    const result = await client.retain('acme', 'The cache moved to host db-9', { requestId: 'while-down' });
    await back;
    assert.deepEqual(hits.map((h) => h.memory.text), ['The staging database moved to host db-7']);
    assert.ok(recalled >= DOWN_MS, `answered after ${recalled} ms`);
    assert.deepEqual([result.status, result.memoryId], ['created', '2']);
    assert.deepEqual(await client.retain('acme', 'The cache moved to host db-9', { requestId: 'while-down' }), result);
    assert.equal(Number((await client.stats('acme')).memories), 2);
    assert.equal(Number((await client.stats('kept')).memories), 1);
  });
});

test('a call to a server that stays gone fails within the window, or the call\'s deadline', async () => {
  await withServer({}, async (gone) => {
    await gone.kill();
    for (const [options, boundMs] of [[{ retryWindowMs: 2000 }, 2000], [{ timeoutMs: 1500 }, 1500]]) {
      const client = new MemoryClient(gone.target, options);
      try {
        const began = Date.now();
        await assert.rejects(client.recall('acme', 'anything'), isUnavailable);
        const failedAfter = Date.now() - began;
        // Tried until the next wait would pass the bound (a wait is at most 1 s).
        assert.ok(failedAfter >= boundMs - 1000 && failedAfter < boundMs + 500, `${JSON.stringify(options)}: ${failedAfter} ms`);
      } finally {
        client.close();
      }
    }
  });
});

test('a watch not yet answered is opened again on the server back', async () => {
  await withServer({}, async (first, client, start) => {
    const watching = client.watchEvents('acme', { timeoutMs: 30000 })[Symbol.asyncIterator]();
    try {
      await client.hotPath('acme', 'enable');
      const firstEvent = watching.next();
      await sleep(500); // the stream opened and waiting
      await first.kill();
      await restarted(first, start);
      const enqueued = await client.retain('acme', 'The nightly export now runs at 02:00', { fast: true });
      const { value } = await firstEvent;
      assert.equal(value.eventId, enqueued.eventId);
    } finally {
      await watching.return();
    }
  });
});

test('an export opened while the server is down is answered by it once back', async () => {
  await withServer({}, async (first, client, start) => {
    await client.retain('acme', 'The quarterly report is due on the 5th');
    await first.kill();
    const back = restarted(first, start);
    const parts = [];
    for await (const part of client.exportTenant('acme')) parts.push(part);
    await back;
    assert.equal(parts[0].manifest.tenant, 'acme');
    assert.equal(Number(parts[0].manifest.memories), 1);
    assert.ok(parts.length > 1 && parts.slice(1).every((p) => p.chunk));
  });
});

/** The events `iterator` gives up to the end of `eventId`'s operation (its 'succeeded'). */
async function untilDone(iterator, eventId) {
  const taken = [];
  for (;;) {
    const { value, done } = await iterator.next();
    if (done) throw new Error(`the stream ended before event ${eventId} succeeded`);
    taken.push(value);
    if (value.eventId === eventId && value.status === 'succeeded') return taken;
  }
}

// SIGKILL, and SIGTERM's graceful stop (which ended a watch as if it were over).
for (const stop of ['kill', 'stop']) test(`a watch that gave events is resumed on the server back with no gap and no duplicate (${stop})`, async () => {
  await withServer({}, async (first, client, start) => {
    await client.hotPath('acme', 'enable');
    const watching = client.watchEvents('acme', { timeoutMs: 60000 })[Symbol.asyncIterator]();
    try {
      const ids = [];
      for (let n = 0; n < 3; n += 1) ids.push((await client.retain('acme', `Shipment ${n} left the Porto depot`, { fast: true })).eventId);
      const seen = await untilDone(watching, ids.at(-1));
      await first[stop]();
      const back = restarted(first, start);
      for (let n = 3; n < 6; n += 1) {
        ids.push((await client.retain('acme', `Shipment ${n} left the Porto depot`, { fast: true, requestId: `s${n}` })).eventId);
      }
      seen.push(...await untilDone(watching, ids.at(-1)));
      await back;
      // A watch opened afterwards replays the tenant's log: the same transitions, each once, in order.
      const again = client.watchEvents('acme', { timeoutMs: 30000 })[Symbol.asyncIterator]();
      const replayed = await untilDone(again, ids.at(-1)).finally(() => again.return());
      const row = (e) => [String(e.sequence), e.eventId, e.status];
      assert.deepEqual(seen.map(row), replayed.map(row));
      assert.deepEqual(new Set(seen.filter((e) => e.status === 'succeeded').map((e) => e.eventId)), new Set(ids));
    } finally {
      await watching.return();
    }
  });
});

test('aggregate stats asked while the server is down are answered by it once back', async () => {
  await withServer({}, async (first, client, start) => {
    await client.retain('acme', 'The quarterly report is due on the 5th');
    await client.retain('globex', 'The board meets on Tuesdays');
    await first.kill();
    const back = restarted(first, start);
    const began = Date.now();
    const stats = await client.aggregateStats();
    const waited = Date.now() - began;
    await back;
    assert.deepEqual(Object.keys(stats.tenants).sort(), ['acme', 'globex']);
    assert.equal(Number(stats.total.memories), 2);
    assert.ok(waited >= DOWN_MS && waited < 15000, `answered after ${waited} ms`);
  });
});

// A refusal the server names (UNAVAILABLE with its ErrorInfo reason) is the server's word on
// whether waiting clears it (src/retry_window.js; the Python client's tests/test_client_retry_reasons.py).
const NO_STORE = ['--replica-url', 's3://nowhere/p?endpoint=http://127.0.0.1:1']; // nothing listens there

test('a replica refusal no wait clears is thrown at once, not after the window', async () => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'mnemosyne-node-home-'));
  const env = {
    AWS_ACCESS_KEY_ID: '',
    AWS_SECRET_ACCESS_KEY: '',
    AWS_SHARED_CREDENTIALS_FILE: path.join(home, 'none'),
    AWS_CONFIG_FILE: path.join(home, 'none'),
    AWS_EC2_METADATA_DISABLED: 'true',
    HOME: home,
  };
  try {
    await withServer({ env, args: NO_STORE }, async (first, client) => {
      const began = Date.now();
      await assert.rejects(client.retain('fresh', 'must not wait out a setting that is wrong', { requestId: 'r1' }), (err) => {
        assert.deepEqual([err.code, err.reason, err.retryDelayMs], [grpc.status.UNAVAILABLE, 'REPLICA_UNREACHABLE', null]);
        assert.match(err.message, /set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/);
        return true;
      });
      const took = Date.now() - began;
      assert.ok(took < 3000, `thrown after ${took} ms`); // the window is 15 s
    });
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
});

test('a replica refusal that clears when object storage answers is waited out within the window', async () => {
  const env = { AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test-secret' };
  await withServer({ env, args: NO_STORE }, async (first) => {
    const client = new MemoryClient(first.target, { retryWindowMs: 3000 });
    try {
      const began = Date.now();
      await assert.rejects(client.retain('fresh', 'waits for object storage to answer', { requestId: 'r1' }), (err) => {
        assert.deepEqual([err.reason, err.retryDelayMs], ['REPLICA_UNREACHABLE', 1000]);
        return true;
      });
      const took = Date.now() - began;
      assert.ok(took >= 2000 && took < 15000, `thrown after ${took} ms`); // called again until the window ended
    } finally {
      client.close();
    }
  });
});

test('a write refused while its tenant moves is waited out and applied once the move ends', async () => {
  const ids = ['m0', 'm1'];
  const ports = { m0: await freePort(), m1: await freePort() };
  const members = ids.map((m) => `${m}=127.0.0.1:${ports[m]}`).join(',');
  let tenant = '';
  for (let i = 0; ownerOf(tenant = `moving-${i}`, ids) !== 'm0'; i += 1);
  const dataDirs = ids.map(() => fs.mkdtempSync(path.join(os.tmpdir(), 'mnemosyne-node-move-')));
  const servers = [];
  const client = new MemoryClient('', { members });
  const probe = new MemoryClient(`127.0.0.1:${ports.m0}`, { retryWindowMs: 0 }); // tried once
  try {
    // The source holds the move after its fence (the MNEMOSYNE_TEST_MOVE_HOLD_AFTER seam).
    for (const [i, m] of ids.entries()) {
      const env = m === 'm0' ? { MNEMOSYNE_TEST_MOVE_HOLD_AFTER: 'fenced' } : {};
      servers.push(await startServer({ dataDir: dataDirs[i], port: ports[m], env, args: ['--member', m, '--members', members] }));
    }
    await client.retain(tenant, 'The Porto depot opens at 07:00');
    const held = client.moveTenant(tenant, 'm1', { member: 'm0', timeoutMs: 4000 });
    for (let fenced = false; !fenced;) { // a write tried once is refused TENANT_MOVING once fenced
      fenced = await probe.retain(tenant, 'a probe of the fence').then(() => false, (err) => err.reason === 'TENANT_MOVING');
      if (!fenced) await sleep(100);
    }
    const began = Date.now();
    let written = null;
    const writing = client.retain(tenant, 'The Porto depot opens at 08:00', { requestId: 'w1' }).then((r) => { written = r; });
    await assert.rejects(held, (err) => err.code === grpc.status.DEADLINE_EXCEEDED); // given up: still fenced
    assert.equal(written, null);
    await client.moveTenant(tenant, 'm1', { member: 'm0' }); // asked again, it goes on and ends
    await writing;
    const waited = Date.now() - began;
    assert.equal(written.status, 'created');
    assert.ok(waited < 15000, `answered after ${waited} ms`);
    const texts = (await client.listMemories(tenant)).memories.map((m) => m.text).filter((t) => !t.includes('probe'));
    assert.deepEqual(texts.sort(), ['The Porto depot opens at 07:00', 'The Porto depot opens at 08:00']);
  } finally {
    client.close();
    probe.close();
    for (const server of servers) await server.kill();
    for (const dir of dataDirs) fs.rmSync(dir, { recursive: true, force: true });
  }
});
