'use strict';
// The ownership hash's test vectors (docs/scale-out-vectors.json), the same in Python
// (tests/test_members.py) and on the server.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { weight, ownerOf, parseMembers } = require('../src/routing');

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
  assert.throws(() => parseMembers('m0'), RangeError);
  assert.throws(() => parseMembers(''), RangeError);
});

test('a NOT_OWNER refusal sends the call to the owner of a new list, or to the member it names', () => {
  const { MemoryClient } = require('../src/client');
  const { MnemosyneError } = require('../src/errors');
  const members = 'm0=127.0.0.1:1,m1=127.0.0.1:2';
  const client = new MemoryClient('', { members });
  const refusal = (metadata) => new MnemosyneError(9, 'NOT_OWNER', 'owned elsewhere', metadata);
  try {
    // The same list, while a tenant moves between members: the member the refusal names, once.
    assert.equal(client._corrected(refusal({ members, owner: 'm1' }), 'm0'), 'm1');
    assert.equal(client._corrected(refusal({ members, owner: 'm1' }), 'm1'), null);
    assert.equal(client._corrected(refusal({ members, owner: 'm9' }), 'm0'), null);
    // A new list: the owner by it.
    assert.equal(client._corrected(refusal({ members: `${members},m2=127.0.0.1:3`, owner: 'm2' }), 'm0'), '');
    assert.equal(client.members.size, 3);
    assert.equal(client._corrected(new MnemosyneError(9, 'TENANT_EXISTS', 'x', {}), 'm0'), null);
  } finally {
    client.close();
  }
});
