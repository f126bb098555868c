'use strict';
// Calls sent straight to the member that owns their tenant (docs/scale-out.md). The rule is the
// server's (store/membership.py) and the Python client's (client/routing.py), with the same test
// vectors:
//   weight(tenant, member) = first 8 bytes, big-endian unsigned, of SHA-256(UTF-8(tenant) 0x00 UTF-8(member))
//   owner = the member of highest weight; on a tie the smallest member id (as UTF-8 bytes)
const crypto = require('node:crypto');

const ROUTE_KEY = 'x-mnemosyne-route';
const NOT_OWNER = 'NOT_OWNER';

function weight(tenant, member) {
  const digest = crypto.createHash('sha256')
    .update(Buffer.concat([Buffer.from(tenant, 'utf8'), Buffer.from([0]), Buffer.from(member, 'utf8')]))
    .digest();
  return digest.readBigUInt64BE(0);
}

/** The member owning `tenant` among `members` (ids). */
function ownerOf(tenant, members) {
  let best = null;
  let bestWeight = -1n;
  for (const member of members) {
    const w = weight(tenant, member);
    if (w > bestWeight || (w === bestWeight && Buffer.compare(Buffer.from(member, 'utf8'), Buffer.from(best, 'utf8')) < 0)) {
      best = member;
      bestWeight = w;
    }
  }
  return best;
}

/** 'ID=HOST:PORT,...' (as `mnemosyne serve --members` takes it) or {id: address} as a Map. */
function parseMembers(members) {
  const parsed = new Map();
  if (typeof members !== 'string') {
    for (const [id, address] of Object.entries(members)) parsed.set(id, address);
  } else {
    for (const item of members.split(/[,\s]+/)) {
      if (!item) continue;
      const at = item.indexOf('=');
      if (at < 1 || at === item.length - 1) throw new RangeError(`member ${JSON.stringify(item)}: give ID=HOST:PORT`);
      parsed.set(item.slice(0, at), item.slice(at + 1));
    }
  }
  if (parsed.size === 0) throw new RangeError('the member list is empty');
  return parsed;
}

module.exports = { ROUTE_KEY, NOT_OWNER, weight, ownerOf, parseMembers };
