'use strict';
// The member list and the ownership hash (docs/scale-out.md): the Node client's placement module.
// The rules are the server's (store/membership.py) and the Python client's (client/routing.py);
// all three load the same test vectors (docs/scale-out-vectors.json):
//   the member list: ID=HOST:PORT items separated by commas and ASCII whitespace; an id is 1-63 of
//     a-z 0-9 - starting with a letter or digit, an address one or more printable ASCII
//     characters; an id listed twice, or an empty list, is refused (a RequestInvalidError whose
//     `reason`, and `problem`, is the vectors' reason). '@FILE' gives the list as a file's text (UTF-8).
//   weight(tenant, member) = first 8 bytes, big-endian unsigned, of SHA-256(UTF-8(tenant) 0x00 UTF-8(member))
//   owner = the member of highest weight; on a tie the smallest member id (as UTF-8 bytes)
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const { RequestInvalidError } = require('./unsendable');

const ROUTE_KEY = 'x-mnemosyne-route';
const NOT_OWNER = 'NOT_OWNER';
const MEMBER_ID_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
const SEPARATORS = /[,\t\n\v\f\r ]+/;
const ADDRESS_PATTERN = /^[!-~]+$/; // printable ASCII: a host name or address and a port

function weight(tenant, member) {
  const digest = crypto.createHash('sha256')
    .update(Buffer.concat([Buffer.from(tenant, 'utf8'), Buffer.from([0]), Buffer.from(member, 'utf8')]))
    .digest();
  return digest.readBigUInt64BE(0);
}

function byBytes(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** The member owning `tenant` among `members` (ids). */
function ownerOf(tenant, members) {
  let best = null;
  let bestWeight = -1n;
  for (const member of members) {
    const w = weight(tenant, member);
    if (w > bestWeight || (w === bestWeight && byBytes(member, best) < 0)) {
      best = member;
      bestWeight = w;
    }
  }
  return best;
}

/** The member a call naming no tenant goes to: the smallest id (as UTF-8 bytes). */
function firstMember(members) {
  return [...members].sort(byBytes)[0];
}

// A client error carrying the reason, as the client's other refusals (the Python client's
// MemberListError.problem); `problem` is kept, the name the docs and the vectors give it.
function refused(message, problem) {
  return Object.assign(new RequestInvalidError(problem, message), { problem });
}

/** The member list `value` gives: itself, or for '@FILE' the file's text (a leading BOM ignored). */
function memberListText(value, source = 'members') {
  if (!value.startsWith('@')) return value;
  try {
    // A FIFO would block the read (and the whole process with it), a device never end it.
    if (!fs.statSync(value.slice(1)).isFile()) throw Object.assign(new Error('not a regular file'), { code: 'not a regular file' });
    return new TextDecoder('utf-8', { fatal: true }).decode(fs.readFileSync(value.slice(1)));
  } catch (err) {
    throw refused(`cannot read ${source} ${value}: ${err.code || err.message}`, 'MEMBER_LIST_UNREADABLE');
  }
}

function checked(member, address, item) {
  if (address === '') throw refused(`member ${JSON.stringify(item)}: give ID=HOST:PORT`, 'MEMBER_ADDRESS_MISSING');
  if (typeof member !== 'string' || !MEMBER_ID_PATTERN.test(member)) {
    throw refused(
      `member ${JSON.stringify(item)}: the id must be 1-63 lowercase letters, digits and '-', starting with a letter or digit`,
      'MEMBER_ID_INVALID',
    );
  }
  if (typeof address !== 'string' || !ADDRESS_PATTERN.test(address)) {
    throw refused(`member ${JSON.stringify(item)}: the address must be printable ASCII (HOST:PORT)`, 'MEMBER_ADDRESS_INVALID');
  }
}

/**
 * 'ID=HOST:PORT,...' (as `mnemosyne serve --members` takes it; not '@FILE': memberListText reads
 * that), or {id: address} (or such a Map), checked by the same rules; a Map of id -> address in
 * the list's order.
 */
function parseMembers(members) {
  const items = typeof members === 'string'
    ? members.split(SEPARATORS).filter(Boolean).map((item) => {
      const at = item.indexOf('=');
      return at < 0 ? [item, '', item] : [item.slice(0, at), item.slice(at + 1), item];
    })
    : [...(members instanceof Map ? members : Object.entries(members))]
      .map(([member, address]) => [member, address, `${member}=${address}`]);
  const parsed = new Map();
  for (const [member, address, item] of items) {
    checked(member, address, item);
    if (parsed.has(member)) throw refused(`member ${member} is listed twice`, 'MEMBER_LISTED_TWICE');
    parsed.set(member, address);
  }
  if (parsed.size === 0) throw refused('the member list is empty: give ID=HOST:PORT,...', 'MEMBER_LIST_EMPTY');
  return parsed;
}

// A member's address to dial is held to the forms gRPC makes a channel to, as the server holds
// those of `serve --members`, `rebalance` and ChangeMembers (service/host/targets.py, one rule; the
// vectors' member_addresses): else the first call sent there fails UNAVAILABLE with the resolver's text.
const TARGET_FORMS = 'HOST:PORT (a host name, an IPv4 address or an [IPv6] address in brackets, and a port 1-65535), '
  + 'or a gRPC target: dns:///HOST:PORT, ipv4:ADDRESS:PORT, ipv6:[ADDRESS]:PORT, unix:PATH';
const HOST_NAME = /^[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?$/;
const MAX_SOCKET_PATH_BYTES = 107; // Linux's sun_path, its NUL left out: gRPC refuses a longer one at every connect

/** What HOST:PORT names: 'ipv4', 'ipv6' (in brackets) or 'name'; null if it is no such address. */
function addressKind(address) {
  const colon = address.lastIndexOf(':');
  const host = address.slice(0, Math.max(colon, 0));
  const port = address.slice(colon + 1);
  if (colon < 0 || !/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) return null;
  if (host.startsWith('[') && host.endsWith(']')) return net.isIPv6(host.slice(1, -1)) ? 'ipv6' : null;
  if (/^[0-9]+$/.test(host.replace(/\./g, ''))) return net.isIPv4(host) ? 'ipv4' : null; // never a name
  return host.length <= 253 && HOST_NAME.test(host) ? 'name' : null;
}

function isPath(path) {
  return path.trim() !== '' && Buffer.byteLength(path, 'utf8') <= MAX_SOCKET_PATH_BYTES;
}

/** Whether `target` is a form gRPC makes a channel to (the schemes of its own resolvers). */
function isTarget(target) {
  const colon = target.indexOf(':');
  const scheme = colon < 0 ? target : target.slice(0, colon);
  const rest = colon < 0 ? '' : target.slice(colon + 1);
  if (scheme === 'dns') { // dns:HOST:PORT, dns:///HOST:PORT, dns://RESOLVER:PORT/HOST:PORT
    let [resolver, address] = ['', rest];
    if (rest.startsWith('//')) {
      const slash = rest.indexOf('/', 2);
      [resolver, address] = slash < 0 ? [rest.slice(2), ''] : [rest.slice(2, slash), rest.slice(slash + 1)];
    }
    return (!resolver || addressKind(resolver) !== null) && addressKind(address) !== null;
  }
  if (scheme === 'ipv4' || scheme === 'ipv6') return rest.split(',').every((address) => addressKind(address) === scheme);
  if (scheme === 'unix') { // unix:PATH or unix:///PATH: gRPC refuses an authority (unix://HOST/PATH)
    const path = rest.startsWith('//') ? rest.slice(2) : rest;
    return isPath(path) && (path === rest || path.startsWith('/'));
  }
  if (scheme === 'unix-abstract') return isPath(rest);
  return addressKind(target) !== null;
}

/** Refuses (a RequestInvalidError, reason MEMBER_ADDRESS_INVALID, the server's) a parsed member list to dial with an address that is no target. */
function checkMemberAddresses(members, source = 'members') {
  for (const [member, address] of members) {
    if (!isTarget(address)) {
      throw refused(
        `${source}: member ${member}'s address ${JSON.stringify(address.slice(0, 200))} is not a server address: give ${TARGET_FORMS}`,
        'MEMBER_ADDRESS_INVALID',
      );
    }
  }
  return members;
}

/** Whether two parsed member lists name the same members at the same addresses (in any order). */
function sameMembers(a, b) {
  return a.size === b.size && [...a].every(([member, address]) => b.get(member) === address);
}

module.exports = {
  ROUTE_KEY, NOT_OWNER, weight, ownerOf, firstMember, memberListText, parseMembers, checkMemberAddresses, sameMembers,
};
