'use strict';
// The Node MemoryHost against the real Python server (host-owned generations, issue 3's
// protocol): stale writes rejected with GENERATION_MISMATCH read from the status details, fail
// closed without an observation, one generation per workspace tool call, no generation in
// anything the model sees, and a Python host and a Node host racing on one tenant.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const readline = require('node:readline');
const { spawn } = require('node:child_process');
const grpc = require('@grpc/grpc-js');
const { MemoryClient, MemoryHost, MnemosyneError } = require('../src');
const { PYTHON, startServer, uniqueTenant } = require('../test-support/support');

const GENERATION_BASE = 9123457n; // the server seam moves every generation up to here

let server;
let client;
test.before(async () => {
  server = await startServer({ env: { MNEMOSYNE_TEST_GENERATION_BASE: String(GENERATION_BASE) } });
  client = new MemoryClient(server.target);
});
test.after(async () => {
  client?.close();
  await server?.stop();
});

class Agent {}

test('a stale write is rejected with GENERATION_MISMATCH from the error details', async () => {
  const tenant = uniqueTenant();
  const host = new MemoryHost(client, tenant);
  const a = new Agent();
  const b = new Agent();
  await host.assembleContext(a, 'main');
  await host.assembleContext(b, 'main');
  assert.deepEqual(await host.callTool(b, 'memory_update', { content: 'B was here' }), { ok: true, result: 'MEMORY.md was replaced.' });
  const stale = await host.callTool(a, 'memory_update', JSON.stringify({ content: 'A was here' }));
  assert.equal(stale.ok, false);
  assert.equal(stale.reason, 'STALE_CONTEXT');
  assert.match(stale.error, /assemble context again/);
  const context = await host.assembleContext(new Agent(), 'main');
  assert.match(context, /B was here/);
  assert.doesNotMatch(context, /A was here/);

  // The same rejection on the raw client: the reason comes from the ErrorInfo in
  // grpc-status-details-bin, and the details carry no current generation.
  const assembled = await client.assembleContext(tenant, 'main');
  await client.updateGlobal(tenant, 'C', { observedGeneration: assembled.globalGeneration });
  await assert.rejects(client.updateGlobal(tenant, 'D', { observedGeneration: assembled.globalGeneration }), (err) => {
    assert.ok(err instanceof MnemosyneError);
    assert.equal(err.code, grpc.status.ABORTED);
    assert.equal(err.reason, 'GENERATION_MISMATCH');
    assert.equal(err.domain, 'mnemosyne.v1');
    assert.ok(!JSON.stringify(err.metadata).match(/[0-9]{7}/), JSON.stringify(err.metadata));
    return true;
  });

  // A reassembles, and its write then succeeds.
  await host.assembleContext(a, 'main');
  assert.equal((await host.callTool(a, 'memory_update', { content: 'A again' })).ok, true);
});

test('no observation, no write: a new host or agent fails closed', async () => {
  const tenant = uniqueTenant();
  const first = new MemoryHost(client, tenant);
  const agent = new Agent();
  await first.assembleContext(agent, 'main');
  const resumed = new MemoryHost(client, tenant); // a resumed agent: its host has observed nothing
  const result = await resumed.callTool(agent, 'memory_update', { content: 'not written' });
  assert.deepEqual([result.ok, result.reason], [false, 'CONTEXT_NOT_ASSEMBLED']);
  const other = await first.callTool(new Agent(), 'update_workspace', { changes: [{ op: 'put', key: 'x.md', content: 'no' }] });
  assert.deepEqual([other.ok, other.reason], [false, 'CONTEXT_NOT_ASSEMBLED']);
  // Without the metadata the server itself refuses (never "the latest generation").
  await assert.rejects(client.updateGlobal(tenant, 'raw'), (err) => err.code === grpc.status.FAILED_PRECONDITION && err.reason === 'OBSERVATION_MISSING');
  assert.doesNotMatch(await first.assembleContext(agent, 'main'), /not written|raw/);
});

test('bad arguments from the model are error results with the reason every surface gives them', async () => {
  // A value of another JSON type or an argument a tool does not take was ARGUMENTS_INVALID (a
  // missing and a wrong-typed argument were one check), where the MCP update_workspace tool said
  // REQUEST_UNDECODABLE; a null content of a put was taken as empty. The Python host's
  // tests/test_host_generations.py has the same rows.
  const host = new MemoryHost(client, uniqueTenant());
  const agent = new Agent();
  await host.assembleContext(agent, 'main');
  const undecodable = 'REQUEST_UNDECODABLE';
  const put = { op: 'put', key: 'a.md', content: 'x' };
  const wrong = [];
  for (const [name, args, reason] of [
    ['memory_update', null, 'ARGUMENTS_INVALID'], ['memory_update', { content: null }, 'ARGUMENTS_INVALID'],
    ['memory_update', '{not json', undecodable], ['memory_update', '[1, 2]', undecodable],
    ['memory_update', { content: 1 }, undecodable], ['memory_update', { text: 'wrong name' }, undecodable],
    ['memory_update', { content: 'x', revision_etag: 3 }, undecodable],
    ['update_workspace', {}, 'CHANGES_EMPTY'], ['update_workspace', { changes: null }, 'CHANGES_EMPTY'],
    ['update_workspace', { changes: [] }, 'CHANGES_EMPTY'], ['update_workspace', { changes: 'put plan.md' }, undecodable],
    ['update_workspace', { changes: [5] }, undecodable], ['update_workspace', { changes: [null] }, undecodable],
    ['update_workspace', { changes: [{ ...put, mode: 'append' }] }, undecodable],
    ['update_workspace', { changes: [{ op: 'move', key: 'a' }] }, 'CHANGE_OP_INVALID'],
    ['update_workspace', { changes: [{ key: 'a.md', content: 'x' }] }, 'CHANGE_OP_INVALID'],
    ['update_workspace', { changes: [{ ...put, op: 1 }] }, undecodable],
    ['update_workspace', { changes: [{ op: 'delete', key: 'a.md', content: 'x' }] }, 'CHANGE_OP_INVALID'],
    ['update_workspace', { changes: [{ op: 'put', key: 'a.md' }] }, 'ARGUMENTS_INVALID'],
    ['update_workspace', { changes: [{ ...put, content: null }] }, 'ARGUMENTS_INVALID'],
    ['update_workspace', { changes: [{ ...put, content: 5 }] }, undecodable],
    ['update_workspace', { changes: [{ op: 'put', content: 'x' }] }, 'RECORD_KEY_INVALID'],
    ['update_workspace', { changes: [{ ...put, key: '' }] }, 'RECORD_KEY_INVALID'],
    ['update_workspace', { changes: [{ ...put, key: 7 }] }, undecodable],
    ['drop_tables', {}, 'ARGUMENTS_INVALID'],
    // Names every object inherits: they were taken for tools, and the call threw a TypeError.
    ['constructor', {}, 'ARGUMENTS_INVALID'], ['toString', '{}', 'ARGUMENTS_INVALID'],
    ['__proto__', {}, 'ARGUMENTS_INVALID'], ['hasOwnProperty', {}, 'ARGUMENTS_INVALID'],
    // Text no request can carry (JSON's "\ud800" parses to a lone surrogate): refused before sending.
    ['memory_update', '{"content": "tea \\ud800"}', undecodable],
  ]) {
    const result = await host.callTool(agent, name, args);
    if (result.ok !== false || result.reason !== reason) wrong.push(`${name} ${JSON.stringify(args)}: ${JSON.stringify(result)}`);
    assert.doesNotMatch(result.error ?? '', /revision_etag|drop_tables|constructor|mode/); // invented names are not echoed
  }
  assert.deepEqual(wrong, []);
  assert.equal((await host.callTool(agent, 'memory_update', { content: 'fine' })).ok, true); // nothing advanced
});

test('a put and a delete in one tool call publish exactly one generation', async () => {
  const tenant = uniqueTenant();
  const before = await client.assembleContext(tenant, 'proj');
  const first = await client.updateWorkspace(tenant, 'proj', [{ op: 'put', key: 'old.md', content: 'old' }],
    { observedGeneration: before.workspaceGeneration });
  assert.equal(first.generation, before.workspaceGeneration + 1n);
  const host = new MemoryHost(client, tenant);
  const agent = new Agent();
  await host.assembleContext(agent, 'proj');
  const result = await host.callTool(agent, 'update_workspace',
    { changes: [{ op: 'put', key: 'plan.md', content: 'the plan' }, { op: 'delete', key: 'old.md' }] });
  assert.equal(result.ok, true, JSON.stringify(result));
  const after = await client.assembleContext(tenant, 'proj');
  assert.equal(after.workspaceGeneration, first.generation + 1n);
  assert.deepEqual(after.workspaceRecords, [{ key: 'plan.md', content: 'the plan' }]);
  assert.equal(after.globalGeneration, before.globalGeneration); // only the written scope moved
});

test('two concurrent tool calls of one agent: exactly one wins', async () => {
  const tenant = uniqueTenant();
  const host = new MemoryHost(client, tenant);
  const agent = new Agent();
  await host.assembleContext(agent, 'main');
  const results = await Promise.all(['first', 'second'].map((c) => host.callTool(agent, 'memory_update', { content: c })));
  assert.equal(results.filter((r) => r.ok).length, 1, JSON.stringify(results));
  assert.deepEqual(results.find((r) => !r.ok).reason, 'STALE_CONTEXT');
  const winner = ['first', 'second'][results.findIndex((r) => r.ok)];
  assert.match(await host.assembleContext(new Agent(), 'main'), new RegExp(`\\b${winner}\\b`));
});

test('advancing one scope keeps the other: concurrent global and workspace writes of one agent', async () => {
  const tenant = uniqueTenant();
  const host = new MemoryHost(client, tenant);
  const agent = new Agent();
  await host.assembleContext(agent, 'main');
  const both = await Promise.all([
    host.callTool(agent, 'memory_update', { content: 'global one' }),
    host.callTool(agent, 'update_workspace', { changes: [{ op: 'put', key: 'plan.md', content: 'plan one' }] }),
  ]);
  assert.deepEqual(both.map((r) => r.ok), [true, true], JSON.stringify(both));
  // Both observations advanced, whatever order the replies came in: the next writes succeed.
  const next = await Promise.all([
    host.callTool(agent, 'memory_update', { content: 'global two' }),
    host.callTool(agent, 'update_workspace', { changes: [{ op: 'put', key: 'plan.md', content: 'plan two' }] }),
  ]);
  assert.deepEqual(next.map((r) => r.ok), [true, true], JSON.stringify(next));
  const final = await client.assembleContext(tenant, 'main');
  assert.deepEqual([final.globalRecords[0].content, final.workspaceRecords[0].content], ['global two', 'plan two']);
});

test('nothing the model sees contains a generation', async () => {
  const tenant = uniqueTenant();
  const host = new MemoryHost(client, tenant);
  const agent = new Agent();
  const seen = [];
  seen.push(await host.assembleContext(agent, 'main', { query: 'plan' }));
  seen.push(await host.callTool(agent, 'memory_update', { content: 'remember the plan' }));
  seen.push(await host.callTool(agent, 'update_workspace', { changes: [{ op: 'put', key: 'plan.md', content: 'p' }] }));
  seen.push(await host.callTool(new Agent(), 'memory_update', { content: 'x' }));
  const stale = new Agent();
  await host.assembleContext(stale, 'main');
  await host.callTool(agent, 'memory_update', { content: 'moves on' });
  seen.push(await host.callTool(stale, 'memory_update', { content: 'stale' }));
  seen.push(MemoryHost.toolSchemas('openai'), MemoryHost.toolSchemas('anthropic'));
  const text = JSON.stringify(seen);
  assert.equal(seen[4].reason, 'STALE_CONTEXT');
  for (let g = GENERATION_BASE - 1n; g <= GENERATION_BASE + 5n; g += 1n) assert.ok(!text.includes(String(g)), `generation ${g} leaked`);
  // No revision-like field anywhere.
  const keys = [];
  JSON.parse(text, (key, value) => { keys.push(key); return value; });
  assert.deepEqual(keys.filter((k) => /generation|revision|etag|hash|version/i.test(k)), []);
  assert.doesNotMatch(text, /generation/i); // not even the word (docs/host-protocol.md section 6)
  // The host did observe the moved generations (the seam works), it just never shows them.
  assert.ok((await client.assembleContext(tenant, 'main')).globalGeneration >= GENERATION_BASE);
});

function pythonHost(target, tenant, content) {
  const child = spawn(PYTHON, [path.join(__dirname, '..', 'test-support', 'python_host.py'), target, tenant, content],
    { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, PYTHONUNBUFFERED: '1' } });
  const lines = readline.createInterface({ input: child.stdout });
  const events = [];
  let waiting = null;
  lines.on('line', (line) => {
    events.push(JSON.parse(line));
    if (waiting) waiting();
  });
  const next = async (event) => {
    for (;;) {
      const found = events.find((e) => e.event === event);
      if (found) return found;
      if (child.exitCode !== null) throw new Error(`python host exited with ${child.exitCode} before ${event}`);
      await new Promise((resolve) => { waiting = resolve; child.once('exit', resolve); });
    }
  };
  return { child, next, go: () => child.stdin.write('go\n') };
}

test('a Python host and a Node host racing on one tenant: exactly one wins', async () => {
  for (let round = 0; round < 3; round += 1) {
    const tenant = uniqueTenant();
    const python = pythonHost(server.target, tenant, `python wins round ${round}`);
    const host = new MemoryHost(client, tenant);
    const agent = new Agent();
    await host.assembleContext(agent, 'main');
    await python.next('assembled'); // both observed the same generation
    python.go();
    const nodeResult = await host.callTool(agent, 'memory_update', { content: `node wins round ${round}` });
    const pythonResult = (await python.next('result')).result;
    await new Promise((resolve) => (python.child.exitCode !== null ? resolve() : python.child.once('exit', resolve)));
    const results = [nodeResult, pythonResult];
    assert.equal(results.filter((r) => r.ok).length, 1, JSON.stringify(results));
    assert.equal(results.find((r) => !r.ok).reason, 'STALE_CONTEXT'); // the Python host maps it the same way
    const winner = nodeResult.ok ? 'node' : 'python';
    const final = await client.assembleContext(tenant, 'main');
    assert.deepEqual(final.globalRecords, [{ key: 'MEMORY.md', content: `${winner} wins round ${round}` }]);
  }
});
