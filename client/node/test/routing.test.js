'use strict';
// The member list's and the ownership hash's test vectors (docs/scale-out-vectors.json), the same
// in Python (tests/test_members.py) and on the server.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { weight, ownerOf, firstMember, memberListText, parseMembers } = require('../src/routing');
const { RequestInvalidError } = require('../src/unsendable');

const vectors = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'docs', 'scale-out-vectors.json'), 'utf8'));

test('weights match the vectors', () => {
  for (const v of vectors.weights) assert.equal(weight(v.tenant, v.member).toString(16).padStart(16, '0'), v.weight);
});

test('owners match the vectors, whatever the order of the list', () => {
  for (const v of vectors.owners) {
    assert.equal(ownerOf(v.tenant, v.members), v.owner, `${v.tenant} over ${v.members}`);
    assert.equal(ownerOf(v.tenant, [...v.members].reverse()), v.owner);
  }
});

test('member lists parse as the server takes them', () => {
  assert.deepEqual([...parseMembers('m0=127.0.0.1:1, m1=127.0.0.1:2')], [['m0', '127.0.0.1:1'], ['m1', '127.0.0.1:2']]);
  // A client error carrying the reason, as the client's other refusals (it was a bare RangeError).
  assert.throws(() => parseMembers('m0'), { name: 'RequestInvalidError', reason: 'MEMBER_ADDRESS_MISSING', problem: 'MEMBER_ADDRESS_MISSING' });
  assert.throws(() => parseMembers(''), (err) => err instanceof RequestInvalidError && err.reason === 'MEMBER_LIST_EMPTY'
    && err.details === 'the member list is empty: give ID=HOST:PORT,...');
});

/** The reason of what `parse` throws (a RequestInvalidError), or a failure when it does not throw. */
function problemOf(parse) {
  try {
    parse();
  } catch (err) {
    assert.ok(err instanceof RequestInvalidError, String(err));
    assert.equal(err.problem, err.reason);
    return err.reason;
  }
  return assert.fail('not refused');
}

test('member lists parse to the vectors, in order, and the first member is the smallest id', () => {
  const { MemoryClient } = require('../src/client');
  for (const v of vectors.member_lists) {
    const parsed = parseMembers(v.list);
    assert.deepEqual([...parsed], v.members, JSON.stringify(v.list)); // [id, address] in the list's order
    assert.deepEqual([...parseMembers(new Map(v.members))], v.members); // the same members as a Map ...
    assert.deepEqual(parseMembers(Object.fromEntries(v.members)), new Map(v.members)); // ... or an object
    assert.equal(firstMember(parsed.keys()), v.first);
    if (v.address_problem) { // the list's rule takes it; no member list to dial does
      assert.equal(problemOf(() => new MemoryClient('', { members: v.list })), v.address_problem, JSON.stringify(v.list));
      continue;
    }
    const client = new MemoryClient('', { members: v.list });
    try {
      // A call naming no tenant goes to the first member.
      assert.equal(client._routed(client.admin, '').stub, client._stubs(parsed.get(v.first)).admin);
    } finally {
      client.close();
    }
  }
});

test('member lists are refused for the reason of the vectors', () => {
  for (const v of vectors.refused_member_lists) {
    assert.equal(problemOf(() => parseMembers(v.list)), v.problem, JSON.stringify(v.list));
  }
});

test('a member address the server would refuse is refused when the client is made, for its reason', () => {
  // It was taken, and each call sent there failed UNAVAILABLE with the resolver's text.
  const { MemoryClient } = require('../src/client');
  for (const address of vectors.member_addresses.accepted) {
    new MemoryClient('', { members: { m0: address } }).close();
  }
  for (const address of vectors.member_addresses.refused) {
    const members = new Map([['m1', '127.0.0.1:2'], ['m0', address]]); // a list: no commas
    assert.equal(problemOf(() => new MemoryClient('127.0.0.1:1', { members })), 'MEMBER_ADDRESS_INVALID', address);
  }
  assert.throws(() => new MemoryClient('', { members: { m0: 'host' } }), {
    code: 3, // INVALID_ARGUMENT, as the client's other refusals
    message: /^INVALID_ARGUMENT MEMBER_ADDRESS_INVALID: members: member m0's address "host" is not/,
    details: /^members: member m0's address "host" is not a server address: give HOST:PORT/,
  });
});

test('a member list given as @FILE is its file\'s text', () => {
  const { MemoryClient } = require('../src/client');
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'members-'));
  try {
    vectors.member_files.forEach((v, number) => {
      const file = path.join(directory, `members-${number}.txt`);
      if (v.file_hex !== undefined) fs.writeFileSync(file, Buffer.from(v.file_hex, 'hex'));
      else if (v.fifo) execFileSync('mkfifo', [file]);
      else if (v.file !== null) fs.writeFileSync(file, v.file, 'utf8');
      if (v.members) {
        assert.deepEqual([...parseMembers(memberListText(`@${file}`))], v.members);
        const client = new MemoryClient('', { members: `@${file}` });
        try {
          assert.deepEqual([...client.members], v.members);
        } finally {
          client.close();
        }
      } else {
        assert.equal(problemOf(() => new MemoryClient('', { members: `@${file}` })), v.problem, JSON.stringify(v));
      }
    });
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
});

test('a NOT_OWNER refusal sends the call to the owner of a new list, or to the member it names', () => {
  const { MemoryClient } = require('../src/client');
  const { MnemosyneError } = require('../src/errors');
  const members = 'm0=127.0.0.1:1,m1=127.0.0.1:2';
  const client = new MemoryClient('', { members });
  const refusal = (metadata) => new MnemosyneError(9, 'NOT_OWNER', 'owned elsewhere', metadata);
  try {
    // The same list, while a tenant moves between members: the member the refusal names, once.
    assert.equal(client._corrected(refusal({ members, owner: 'm1' }), 'm0').again, 'm1');
    assert.deepEqual(client._corrected(refusal({ members, owner: 'm1' }), 'm1'), {
      again: null, why: 'it names member m1, which refused it, and the member list is unchanged',
    });
    assert.deepEqual(client._corrected(refusal({ members, owner: 'm9' }), 'm0'), {
      again: null, why: 'member m9 is not in the member list the refusal carries',
    });
    // The same members in another order (as the server describes its list: by id) are the same list.
    const reordered = new MemoryClient('', { members: 'm1=127.0.0.1:2,m0=127.0.0.1:1' });
    try {
      assert.equal(reordered._corrected(refusal({ members, owner: 'm1' }), 'm0').again, 'm1');
    } finally {
      reordered.close();
    }
    // A new list: the owner by it.
    assert.equal(client._corrected(refusal({ members: `${members},m2=127.0.0.1:3`, owner: 'm2' }), 'm0').again, '');
    assert.equal(client.members.size, 3);
    assert.deepEqual(client._corrected(new MnemosyneError(9, 'TENANT_EXISTS', 'x', {}), 'm0'), { again: null, why: '' });
  } finally {
    client.close();
  }
});

test('a NOT_OWNER refusal whose member list cannot be used is the refusal itself, the list kept', async () => {
  // A broken member's redirect (no member list, an id listed twice, an address that is no server
  // address, a bad id): its list was parsed as the caller's, and a call rejected INVALID_ARGUMENT
  // (a RequestInvalidError, MEMBER_ADDRESS_MISSING ...) as if the caller's own list were wrong. It
  // is as a refusal without a list, as the Python client takes it (tests/test_members.py): the
  // server's FAILED_PRECONDITION NOT_OWNER, not sent again, the client's list kept.
  const grpc = require('@grpc/grpc-js');
  const { MemoryClient } = require('../src/client');
  const { MnemosyneError } = require('../src/errors');
  const { loadServices } = require('../src/protos');
  const { statusMetadata } = require('../test-support/support');
  const server = new grpc.Server();
  const answered = { members: '', calls: 0 };
  server.addService(loadServices().MemoryService.service, {
    Recall: (call, callback) => {
      answered.calls += 1;
      const message = `tenant ${call.request.tenant} is owned by member m1, not m0`;
      callback({
        code: grpc.status.FAILED_PRECONDITION,
        details: message,
        metadata: statusMetadata(grpc.status.FAILED_PRECONDITION, message, 'NOT_OWNER',
          { metadata: { owner: 'm1', members: answered.members } }),
      });
    },
  });
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });
  const client = new MemoryClient('', { members: `m0=127.0.0.1:${port},m1=127.0.0.1:${port}`, retries: 0 });
  try {
    const kept = [...client.members];
    for (const members of ['no list', 'm0=127.0.0.1:1,m0=127.0.0.1:2', 'm0=127.0.0.1:0', 'm-=x', '=127.0.0.1:1']) {
      answered.members = members;
      const calls = answered.calls;
      await assert.rejects(client.recall('acme', 'x'), (err) => {
        assert.ok(err instanceof MnemosyneError && !(err instanceof RequestInvalidError), `${err.name} ${err.message}`);
        assert.deepEqual([err.code, err.reason, err.metadata.members], [grpc.status.FAILED_PRECONDITION, 'NOT_OWNER', members]);
        assert.match(err.message, /owned by member m1/);
        assert.match(err.message, /\(not sent to member m1, the owner it names: the member list the refusal carries cannot be used \(/);
        return true;
      });
      assert.equal(answered.calls, calls + 1); // not sent again
      assert.deepEqual([...client.members], kept);
    }
  } finally {
    client.close();
    server.forceShutdown();
  }
});
