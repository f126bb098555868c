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
