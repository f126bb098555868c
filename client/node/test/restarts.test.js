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
const os = require('node:os');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const grpc = require('@grpc/grpc-js');
const { MemoryClient } = require('../src');
const { startServer } = require('../test-support/support');

const DOWN_MS = 2000; // from the death to the start again (which takes about a second more)

/** A server on a data directory of its own, and that directory removed when `body` has run. */
async function withDataDir(body) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'mnemosyne-node-restart-'));
  const started = [];
  const start = async (options) => {
    const server = await startServer({ dataDir, ...options });
    started.push(server);
    return server;
  };
  try {
    await body(start);
  } finally {
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

test('a retain whose reply a crash lost is answered by the server back and applied once', async () => {
  await withDataDir(async (start) => {
    const first = await start({ env: { MNEMOSYNE_TEST_CRASH_AFTER_COMMIT: 'retain' } });
    const client = new MemoryClient(first.target);
    try {
      const back = restarted(first, start);
      const began = Date.now();
      const result = await client.retain('acme', 'Invoice INV-4471 was paid on Friday', { requestId: 'across-a-restart' });
      const waited = Date.now() - began;
      await back;
      assert.deepEqual([result.status, result.memoryId], ['created', '1']);
      assert.ok(waited >= DOWN_MS && waited < 15000, `answered after ${waited} ms`);
      const stats = await client.stats('acme');
      assert.deepEqual([Number(stats.memories), Number(stats.writes), Number(stats.duplicates)], [1, 1, 0]);
    } finally {
      client.close();
    }
  });
});

test('calls made while the server is down are answered by it once back; the unsafe one is not resent', async () => {
  await withDataDir(async (start) => {
    const first = await start();
    const client = new MemoryClient(first.target);
    try {
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
    } finally {
      client.close();
    }
  });
});

test('a call to a server that stays gone fails within the window, or the call\'s deadline', async () => {
  await withDataDir(async (start) => {
    const gone = await start();
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
  await withDataDir(async (start) => {
    const first = await start();
    const client = new MemoryClient(first.target);
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
      client.close();
    }
  });
});
