'use strict';
// The client covers every service of protos/: a stub for each, all on one channel. A method for
// every RPC, in this client and the Python one: tests/test_docs.py (a new RPC fails it).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const protoLoader = require('@grpc/proto-loader');
const { MemoryClient } = require('../src');
const { PROTO_ROOT, LOADER_OPTIONS, loadServices } = require('../src/protos');

const V1 = path.join(PROTO_ROOT, 'mnemosyne', 'v1');

/** {ServiceName: [rpc names]} of every service in protos/mnemosyne/v1. */
function declaredServices() {
  const files = fs.readdirSync(V1).filter((f) => f.endsWith('.proto')).map((f) => `mnemosyne/v1/${f}`);
  const definition = protoLoader.loadSync(files, LOADER_OPTIONS);
  return Object.fromEntries(Object.entries(definition)
    .filter(([name, value]) => name.startsWith('mnemosyne.v1.') && Object.values(value).some((m) => m && typeof m.path === 'string'))
    .map(([name, value]) => [name.split('.').pop(), Object.values(value).map((m) => m.path.split('/').pop()).sort()]));
}

const STUB_OF_SERVICE = {
  MemoryService: 'memory', WorkspaceService: 'workspace', AdminService: 'admin', EventsService: 'events', HotPathService: 'hotPathStub',
  WebhookService: 'webhooks',
};

test('a stub for every service, all on one channel', () => {
  const declared = declaredServices();
  assert.deepEqual(Object.keys(loadServices()).sort(), Object.keys(declared).sort());
  assert.deepEqual(Object.keys(STUB_OF_SERVICE).sort(), Object.keys(declared).sort());
  const client = new MemoryClient('127.0.0.1:1');
  try {
    for (const [service, stub] of Object.entries(STUB_OF_SERVICE)) {
      assert.ok(client[stub] instanceof loadServices()[service], `${service} stub`);
      assert.equal(client[stub].getChannel(), client.memory.getChannel(), `${service} channel`);
    }
  } finally {
    client.close();
  }
});
