'use strict';
// When the client repeats a call, against a tiny grpc-js server that answers the first call(s)
// with a chosen status: UNAVAILABLE, and RESOURCE_EXHAUSTED whose google.rpc.Status details carry
// an ErrorInfo and a RetryInfo (what the server sends when an admission limit is hit). Only calls
// that are safe to repeat are repeated: reads, and writes that carry a request id.
const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { MemoryClient, MnemosyneError } = require('../src');
const { loadServices } = require('../src/protos');
const { statusMetadata } = require('../test-support/support');

const ADMISSION_METADATA = { limit: 'admission' };
const ADMISSION = (retryDelayMs) => ({
  code: grpc.status.RESOURCE_EXHAUSTED,
  details: 'too many writes in flight for this tenant',
  metadata: statusMetadata(grpc.status.RESOURCE_EXHAUSTED, 'too many writes in flight for this tenant', 'ADMISSION_LIMIT', { metadata: ADMISSION_METADATA, retryDelayMs }),
});

/**
 * A MemoryService whose Retain and Recall answer `failures` (a list of grpc errors) first, one
 * per call, then succeed. Resolves {target, calls, stop()}; `calls` records each request.
 */
async function fakeServer(failures, port = 0) {
  const { MemoryService } = loadServices();
  const calls = [];
  const answer = (success) => (call, callback) => {
    calls.push({ at: Date.now(), request: call.request });
    const failure = failures[calls.length - 1];
    if (failure) callback(failure);
    else callback(null, success(call.request));
  };
  const server = new grpc.Server();
  server.addService(MemoryService.service, {
    Retain: answer(() => ({ result: { status: 'CREATED', memory_id: '7' } })),
    Recall: answer(() => ({ hits: [] })),
  });
  const bound = await new Promise((resolve, reject) => {
    server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });
  return { target: `127.0.0.1:${bound}`, port: bound, calls, stop: () => server.forceShutdown() };
}

async function withServer(failures, options, body) {
  const server = await fakeServer(failures);
  const client = new MemoryClient(server.target, options);
  try {
    await body(client, server.calls);
  } finally {
    client.close();
    server.stop();
  }
}

test('RESOURCE_EXHAUSTED with RetryInfo: a write with a request id is repeated after retry_delay', async () => {
  await withServer([ADMISSION(300)], {}, async (client, calls) => {
    const started = Date.now();
    const result = await client.retain('acme', 'Order ORD-1 shipped', { requestId: 'req-1' });
    assert.deepEqual([result.status, result.memoryId], ['created', '7']);
    assert.equal(calls.length, 2);
    assert.deepEqual(calls.map((c) => c.request.request_id), ['req-1', 'req-1']); // the same write, deduplicated by the server
    assert.ok(calls[1].at - calls[0].at >= 290, `repeated after ${calls[1].at - calls[0].at} ms`);
    assert.ok(Date.now() - started < 3000);
  });
});

test('RESOURCE_EXHAUSTED with RetryInfo: a read is repeated too', async () => {
  await withServer([ADMISSION(50), ADMISSION(50)], {}, async (client, calls) => {
    assert.deepEqual(await client.recall('acme', 'order'), []);
    assert.equal(calls.length, 3);
  });
});

test('a write without a request id is not repeated; the error keeps its reason and retry delay', async () => {
  await withServer([ADMISSION(300)], {}, async (client, calls) => {
    await assert.rejects(client.retain('acme', 'Order ORD-2 shipped', { requestId: '' }), (err) => {
      assert.ok(err instanceof MnemosyneError);
      assert.equal(err.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.equal(err.reason, 'ADMISSION_LIMIT');
      assert.equal(err.domain, 'mnemosyne.v1');
      assert.deepEqual(err.metadata, { limit: 'admission' });
      assert.equal(err.retryDelayMs, 300);
      return true;
    });
    assert.equal(calls.length, 1);
    assert.equal(calls[0].request.request_id, '');
  });
});

test('RESOURCE_EXHAUSTED without RetryInfo (a quota) is final, even for a read', async () => {
  const quota = {
    code: grpc.status.RESOURCE_EXHAUSTED,
    details: 'tenant quota of memories reached',
    metadata: statusMetadata(grpc.status.RESOURCE_EXHAUSTED, 'tenant quota of memories reached', 'QUOTA_MEMORIES', { metadata: ADMISSION_METADATA }),
  };
  await withServer([quota], {}, async (client, calls) => {
    await assert.rejects(client.recall('acme', 'order'), (err) => err.reason === 'QUOTA_MEMORIES' && err.retryDelayMs === null);
    assert.equal(calls.length, 1);
  });
});

test('retry_delay is capped at maxRetryDelayMs (default 5 s)', async () => {
  assert.equal(new MemoryClient('127.0.0.1:1').maxRetryDelayMs, 5000);
  await withServer([ADMISSION(3600 * 1000)], { maxRetryDelayMs: 200 }, async (client, calls) => {
    const started = Date.now();
    assert.equal((await client.retain('acme', 'Order ORD-3 shipped')).status, 'created');
    assert.equal(calls.length, 2);
    const waited = calls[1].at - calls[0].at;
    assert.ok(waited >= 190 && Date.now() - started < 3000, `repeated after ${waited} ms`);
  });
});

test('at most `retries` repeats, then the last error', async () => {
  await withServer(Array(10).fill(ADMISSION(10)), { retries: 2 }, async (client, calls) => {
    await assert.rejects(client.retain('acme', 'Order ORD-4 shipped'), (err) => err.reason === 'ADMISSION_LIMIT');
    assert.equal(calls.length, 3);
    assert.equal(new Set(calls.map((c) => c.request.request_id)).size, 1);
  });
});

test('UNAVAILABLE: a read and a write with a request id are repeated, a write without one is not', async () => {
  const unavailable = { code: grpc.status.UNAVAILABLE, details: 'shutting down' };
  await withServer([unavailable], {}, async (client, calls) => {
    assert.deepEqual(await client.recall('acme', 'order'), []);
    assert.equal(calls.length, 2);
  });
  await withServer([unavailable], {}, async (client, calls) => {
    assert.equal((await client.retain('acme', 'Order ORD-5 shipped')).status, 'created');
    assert.equal(calls.length, 2);
  });
  await withServer([unavailable], {}, async (client, calls) => {
    await assert.rejects(client.retain('acme', 'Order ORD-6 shipped', { requestId: '' }), (err) => err.code === grpc.status.UNAVAILABLE);
    assert.equal(calls.length, 1);
  });
});

test('UNAVAILABLE with RetryInfo (a member list changing): repeated after its retry_delay, not the backoff', async () => {
  const changing = {
    code: grpc.status.UNAVAILABLE,
    details: 'the member list is changing',
    metadata: statusMetadata(grpc.status.UNAVAILABLE, 'the member list is changing', 'MEMBERS_CHANGING', { metadata: ADMISSION_METADATA, retryDelayMs: 400 }),
  };
  await withServer([changing], {}, async (client, calls) => {
    await client.retain('acme', 'Order ORD-2 shipped', { requestId: 'req-2' });
    assert.equal(calls.length, 2);
    assert.ok(calls[1].at - calls[0].at >= 390, `repeated after ${calls[1].at - calls[0].at} ms`);
  });
});

test('a status detail that cannot be decoded is as none, the others kept (as in the Python client)', async () => {
  // A broken server's garbled RetryInfo lost the ErrorInfo beside it (the whole status was dropped),
  // a garbled ErrorInfo the RetryInfo beside it (a read then not repeated after its delay).
  const { ERROR_INFO_TYPE, RETRY_INFO_TYPE } = require('../src/errors');
  const exhausted = (reason, options) => ({
    code: grpc.status.RESOURCE_EXHAUSTED,
    details: 'busy',
    metadata: statusMetadata(grpc.status.RESOURCE_EXHAUSTED, 'busy', reason, options),
  });
  const garbledStatus = new grpc.Metadata();
  garbledStatus.set('grpc-status-details-bin', Buffer.from([0xff, 0xff, 0xff, 0xff]));
  const cases = [ // the failures, then the reason, retry delay and calls seen
    [[{ code: grpc.status.FAILED_PRECONDITION, details: 'busy', metadata: garbledStatus }], '', null, 1],
    [[exhausted(null, { garbled: [ERROR_INFO_TYPE] })], '', null, 1],
    [[exhausted('ADMISSION_LIMIT', { garbled: [RETRY_INFO_TYPE] })], 'ADMISSION_LIMIT', null, 1],
    [Array(2).fill(exhausted(null, { garbled: [ERROR_INFO_TYPE], retryDelayMs: 10 })), '', 10, 2],
  ];
  for (const [failures, reason, retryDelayMs, calls] of cases) {
    await withServer(failures, { retries: 1 }, async (client, seen) => {
      await assert.rejects(client.recall('acme', 'order'), (err) => {
        assert.ok(err instanceof MnemosyneError, String(err));
        assert.deepEqual([err.code, err.reason, err.details, err.retryDelayMs], [failures[0].code, reason, 'busy', retryDelayMs]);
        return true;
      });
      assert.equal(seen.length, calls);
    });
  }
});

// gRPC waits longer and longer between attempts to connect to a server that is down (1 s, then
// 1.6 times more each time, up to 2 minutes by default), shared by a process's clients of one
// address: the client keeps it short, so a server back after an outage is used at once (tried for
// 1 s: the default window, 15 s, would ride out gRPC's wait).
test('a server back after a long outage answers a kept client and a new one at once', async () => {
  const first = await fakeServer([]);
  const kept = new MemoryClient(first.target, { retryWindowMs: 1000 });
  try {
    assert.deepEqual(await kept.recall('acme', 'order'), []);
    first.stop();
    const outageEnds = Date.now() + 5000; // long enough for gRPC's default wait to pass 4 s
    while (Date.now() < outageEnds) {
      await assert.rejects(kept.recall('acme', 'order'), (err) => err.code === grpc.status.UNAVAILABLE);
    }
    const again = await fakeServer([], first.port);
    const fresh = new MemoryClient(again.target, { retryWindowMs: 1000 });
    try {
      assert.deepEqual(await kept.recall('acme', 'order'), []);
      assert.deepEqual(await fresh.recall('acme', 'order'), []);
    } finally {
      fresh.close();
      again.stop();
    }
  } finally {
    kept.close();
  }
});

test('an UNAVAILABLE the server names without a delay is repeated only for a reason waiting clears (as in the Python client)', async () => {
  // A server up to 0.1.0 sent SHUTTING_DOWN, TENANT_BUSY, FILE_LIMIT... without a retry delay (ours
  // sends one now): still repeated, as after a restart. Another reason without a delay is the
  // server's word that no wait clears it: one try; with a delay, repeated after it.
  const cases = [ // reason, retry delay, calls seen
    ['SHUTTING_DOWN', undefined, 3],
    ['TENANT_BUSY', undefined, 3],
    ['FILE_LIMIT', undefined, 3],
    ['REPLICA_UNREACHABLE', undefined, 1],
    ['EXTRACTION_FAILED', undefined, 1],
    ['REPLICA_UNREACHABLE', 50, 3],
  ];
  for (const [reason, retryDelayMs, calls] of cases) {
    const refused = {
      code: grpc.status.UNAVAILABLE,
      details: 'refused',
      metadata: statusMetadata(grpc.status.UNAVAILABLE, 'refused', reason, { retryDelayMs }),
    };
    await withServer(Array(3).fill(refused), { retries: 2 }, async (client, seen) => {
      await assert.rejects(client.recall('acme', 'order'), (err) => err.reason === reason);
      assert.equal(seen.length, calls, `${reason} ${retryDelayMs}`);
    });
  }
});
