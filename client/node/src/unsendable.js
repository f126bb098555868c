'use strict';
// Arguments that make no request, refused before anything is sent (the Python client's
// client/unsendable.py is the same rule), with a RequestInvalidError (a MnemosyneError,
// INVALID_ARGUMENT) carrying the reason the server gives the same fault:
//   REQUEST_UNDECODABLE  a text holding a lone surrogate (UTF-8 cannot encode it; protobufjs would
//                        send bytes no server decodes)
//   NUMBER_INVALID       an integer field given a value that is no whole number of its range
//                        (1.5, NaN, 1e300, 2**64, a BigInt past 64 bits): protobufjs would truncate
//                        or wrap it (2**64 became 384, 1.5 became 1) or fail as INTERNAL
//   OCCURRED_AT_INVALID, EXPIRES_AT_INVALID, TIMESTAMP_INVALID
//                        a time (a Date or unix seconds) that is no valid Date nor a finite number,
//                        or outside the years 1 to 9999
//   TIMEOUT_INVALID      a deadline (a number) that is not more than 0 and at most a year (grpc-js
//                        throws, outside the call's promise, for one past its range)
//   REQUEST_TOO_LARGE    a message over the client's maxRequestBytes (the server's default
//                        --max-request-bytes), each one a call sends, an import's chunks too:
//                        grpc-js sends any size (`checkedSize`)
// A value of another type than its field's (a text for a time or a deadline, a number for a
// name) is REQUEST_UNDECODABLE, as the Python client's ArgumentTypeError: a wrong type is a
// decoding refusal, the field's own reason is for a value of its type (docs/http-api.md "One
// mistake, one reason").
// Every request is checked against its message type in the protos (`checkedRequest`), so a new
// field or method is covered.
const grpc = require('@grpc/grpc-js');
const { MnemosyneError } = require('./errors');
const { loadServiceRoot } = require('./protos');

class RequestInvalidError extends MnemosyneError {
  constructor(reason, message, metadata = {}) {
    super(grpc.status.INVALID_ARGUMENT, reason, message, metadata, 'mnemosyne.v1');
  }
}

function refused(reason, message) {
  return new RequestInvalidError(reason, message);
}

/** A value as the caller gave it, short, for a message. */
function shown(value, most = 40) {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value.slice(0, most));
  if (value instanceof Date) return `Date(${value.getTime()})`;
  try {
    return String(value).slice(0, most);
  } catch {
    // No text form: an object of no prototype (Object.create(null)), or whose toString throws.
    return `an ${typeof value} with no text form`;
  }
}

const INTEGERS = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  sint32: [-(2n ** 31n), 2n ** 31n - 1n],
  sfixed32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  fixed32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  sint64: [-(2n ** 63n), 2n ** 63n - 1n],
  sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  fixed64: [0n, 2n ** 64n - 1n],
};
const WIDE = new Set(['int64', 'sint64', 'sfixed64', 'uint64', 'fixed64']);

/**
 * `value` as the integer field `field` (of protobuf type `type`) sends it exactly: a decimal
 * string for a 64-bit field, a number for a 32-bit one; refused NUMBER_INVALID when it is no
 * whole number of the field's range. A number, a BigInt or a decimal string are taken.
 */
function integer(value, type, field) {
  let whole = null;
  if (typeof value === 'bigint') whole = value;
  else if (typeof value === 'number' && Number.isInteger(value)) whole = BigInt(value);
  else if (typeof value === 'string' && /^-?[0-9]{1,40}$/.test(value)) whole = BigInt(value);
  const [low, high] = INTEGERS[type];
  if (whole === null || whole < low || whole > high) {
    throw refused('NUMBER_INVALID', `${field} is ${shown(value)}; it must be a whole number from ${low} to ${high} `
      + `(ids and sizes are 64-bit, k and limits 32-bit integers)`);
  }
  return WIDE.has(type) ? whole.toString(10) : Number(whole);
}

/**
 * `value` when it is well-formed Unicode; refused REQUEST_UNDECODABLE when it holds a lone
 * surrogate, or is no string (a number too: tenant 5 went as "5", what the caller may not have meant).
 */
function text(value, field) {
  if (typeof value !== 'string') throw shapeless(field, value, 'a text');
  if (value.isWellFormed()) return value;
  let at = 0;
  for (; at < value.length; at += 1) {
    const code = value.charCodeAt(at);
    if (code >= 0xd800 && code <= 0xdbff && at + 1 < value.length && (value.charCodeAt(at + 1) & 0xfc00) === 0xdc00) at += 1;
    else if (code >= 0xd800 && code <= 0xdfff) break;
  }
  throw refused('REQUEST_UNDECODABLE', `${field} holds "\\u${value.charCodeAt(at).toString(16)}" (a lone surrogate) `
    + `at ${at}, which UTF-8 cannot encode: send valid Unicode (a surrogate pair joined into one character)`);
}

// The first and last second a google.protobuf.Timestamp holds: 0001-01-01T00:00:00Z, 9999-12-31T23:59:59Z.
const FIRST_SECOND = -62135596800;
const LAST_SECOND = 253402300799;
const TIME_REASONS = { occurred_at: 'OCCURRED_AT_INVALID', expires_at: 'EXPIRES_AT_INVALID' };

/** The reason a time in the field `name` is refused with, as the server names it. */
function timeReason(name) {
  return TIME_REASONS[name] ?? 'TIMESTAMP_INVALID';
}

/**
 * `date` (a Date) as a google.protobuf.Timestamp; refused with `reason` when it is no valid Date
 * or outside the years 1 to 9999.
 */
function timestampFrom(date, field, reason) {
  const ms = date instanceof Date ? date.getTime() : NaN;
  const seconds = Math.floor(ms / 1000);
  if (!(seconds >= FIRST_SECOND && seconds <= LAST_SECOND)) { // false for NaN too
    throw refused(reason, `${field} is ${shown(date)}; give a valid Date between 0001-01-01T00:00:00Z and `
      + '9999-12-31T23:59:59Z');
  }
  return { seconds: String(seconds), nanos: (ms - seconds * 1000) * 1e6 };
}

/**
 * `value` (a Date, or a number of unix seconds as the Python client takes a time) as a
 * google.protobuf.Timestamp. Refused as the Python client refuses it: REQUEST_UNDECODABLE when
 * it is neither (a text, a BigInt, a boolean), `reason` when it is no time (an invalid Date, NaN,
 * an infinity) or outside the years 1 to 9999, in the Python client's words for a number.
 */
function timestampFromDateOrSeconds(value, field, reason) {
  if (typeof value !== 'number') {
    if (value instanceof Date) return timestampFrom(value, field, reason);
    throw shapeless(field, value, 'a Date or a number of unix seconds');
  }
  if (!(value >= FIRST_SECOND && value < LAST_SECOND + 1)) { // false for NaN too
    throw refused(reason, `${field} is ${value} unix seconds; a time is between ${FIRST_SECOND} `
      + `(0001-01-01T00:00:00Z) and ${LAST_SECOND + 1} (10000-01-01T00:00:00Z, excluded)`);
  }
  const seconds = Math.floor(value);
  // Kept to the microsecond, as the server keeps it: the float's last digits are noise.
  const nanos = Math.min(Math.round((value - seconds) * 1e6), 999999) * 1000;
  return { seconds: String(seconds), nanos };
}

function checkedTimestamp(value, field, name) {
  const seconds = value.seconds == null ? 0n : BigInt(integer(value.seconds, 'int64', `${field}.seconds`));
  if (seconds < BigInt(FIRST_SECOND) || seconds > BigInt(LAST_SECOND)) {
    throw refused(timeReason(name), `${field} is ${seconds} unix seconds; a time is between ${FIRST_SECOND} `
      + `(0001-01-01T00:00:00Z) and ${LAST_SECOND} (9999-12-31T23:59:59Z)`);
  }
  return { ...value, seconds: seconds.toString(10), nanos: value.nanos == null ? 0 : integer(value.nanos, 'int32', `${field}.nanos`) };
}

/** The refusal of `value` given for `field`, which takes `what`: protobufjs would send "[object Object]" or fail as INTERNAL. */
function shapeless(field, value, what) {
  const names = { object: 'an object', boolean: 'a boolean', undefined: 'undefined' };
  const kind = value === null ? 'null' : Array.isArray(value) ? 'a list' : names[typeof value] ?? `a ${typeof value}`;
  return refused('REQUEST_UNDECODABLE', `${field} is ${kind}; it takes ${what}`);
}

/** `value` when it is a list (a client's argument mapped before the request is built), else REQUEST_UNDECODABLE. */
function listOf(value, field) {
  if (!Array.isArray(value)) throw shapeless(field, value, 'a list');
  return value;
}

/** One field's value (not repeated) of `field` (a protobufjs Field) as sent. */
function fieldValue(field, value, where) {
  if (value === undefined || value === null) return value;
  if (field.type === 'string') return text(value, where);
  if (Object.hasOwn(INTEGERS, field.type)) return integer(value, field.type, where);
  // protobufjs sent 'no' as true and '0.5' as a number: what the caller did not give.
  if (field.type === 'bool' && typeof value !== 'boolean') throw shapeless(where, value, 'true or false');
  if ((field.type === 'double' || field.type === 'float') && typeof value !== 'number') throw shapeless(where, value, 'a number');
  if (field.resolvedType && field.resolvedType.fields) {
    if (typeof value !== 'object' || Array.isArray(value)) throw shapeless(where, value, `a ${field.resolvedType.name} object`);
    if (field.resolvedType.fullName === '.google.protobuf.Timestamp') return checkedTimestamp(value, where, field.name);
    return message(field.resolvedType, value, where);
  }
  return value;
}

/** `value` (a plain object of `type`, a protobufjs Type) with every field checked and made exact. */
function message(type, value, where = '') {
  const out = { ...value };
  for (const field of type.fieldsArray) {
    const given = value[field.name];
    if (given === undefined || given === null) continue;
    const name = where ? `${where}.${field.name}` : field.name;
    if (field.map) {
      if (typeof given !== 'object' || Array.isArray(given)) throw shapeless(name, given, 'an object of texts');
      const entries = given instanceof Map ? [...given] : Object.entries(given);
      out[field.name] = Object.fromEntries(entries.map(([k, v]) => [text(k, `${name} key`), fieldValue(field, v, `${name}[${JSON.stringify(k)}]`)]));
    } else if (field.repeated) {
      if (!Array.isArray(given)) throw shapeless(name, given, 'a list');
      out[field.name] = given.map((v, i) => fieldValue(field, v, `${name}[${i}]`));
    } else {
      out[field.name] = fieldValue(field, given, name);
    }
  }
  return out;
}

/** The protobufjs Type of the request of `method` of `stub` (a grpc-js client). */
function requestType(stub, method) {
  const [, service, name] = stub.constructor.service[method].path.split('/');
  return loadServiceRoot().lookupService(service).methods[name].resolvedRequestType;
}

/** The request of `method` of `stub` (a grpc-js client) as it is sent, or a RequestInvalidError. */
function checkedRequest(stub, method, request) {
  return message(requestType(stub, method), request);
}

// The most bytes protobuf spends on one value besides its content: a tag (field numbers here take
// at most 2 bytes of the 5 one may) and a length, or a varint number (at most 10 bytes).
const VALUE_BYTES = 16;

/**
 * At least the bytes `value` (a checked request, or a part of one) takes encoded: every text's
 * UTF-8 and every value's tag and length, the names of a message's fields counted too (never
 * sent). Cheap, so that only a request near the limit is encoded to be measured.
 */
function sizeBound(value) {
  if (typeof value === 'string') return VALUE_BYTES + Buffer.byteLength(value, 'utf8');
  if (value instanceof Uint8Array) return VALUE_BYTES + value.length;
  if (value === null || typeof value !== 'object') return VALUE_BYTES;
  let total = VALUE_BYTES;
  for (const [key, part] of Object.entries(value)) total += sizeBound(key) + sizeBound(part);
  return total;
}

/**
 * `request` (checked) of `method` of `stub` when it takes at most `maxBytes` encoded, else a
 * RequestInvalidError REQUEST_TOO_LARGE naming the limit, before it is sent: gRPC core refuses a
 * message over twice the server's --max-request-bytes with its own status and no ErrorInfo
 * (docs/operations.md "What gRPC refuses itself"). The Python client's MemoryClient.call is the
 * same rule.
 */
function checkedSize(stub, method, request, maxBytes) {
  if (sizeBound(request) <= maxBytes) return request;
  const type = requestType(stub, method);
  const size = type.encode(type.fromObject(request)).finish().length;
  if (size <= maxBytes) return request;
  throw new RequestInvalidError('REQUEST_TOO_LARGE', `the request has ${size} bytes; this client's limit is `
    + `${maxBytes} (new MemoryClient(target, {maxRequestBytes}), by default the server's default `
    + '--max-request-bytes): split it, e.g. a large batch into several, or raise both, the server\'s first',
  { limit: String(maxBytes) });
}

// The longest deadline a call takes (a year): grpc-js cannot send one past ~11,000 years, and
// throws outside the call's promise, ending the process.
const MAX_TIMEOUT_MS = 365 * 24 * 3600 * 1000;

/** `timeoutMs` when it can be a call's deadline (null/undefined: none), else TIMEOUT_INVALID. */
function checkedTimeoutMs(timeoutMs, field = 'timeoutMs') {
  if (timeoutMs == null) return timeoutMs;
  if (typeof timeoutMs !== 'number') throw shapeless(field, timeoutMs, 'a number of milliseconds');
  if (!(typeof timeoutMs === 'number' && timeoutMs > 0 && timeoutMs <= MAX_TIMEOUT_MS)) { // false for NaN too
    throw refused('TIMEOUT_INVALID', `${field} is ${shown(timeoutMs)} milliseconds; a call's deadline is more than 0 `
      + `and at most ${MAX_TIMEOUT_MS} (a year)`);
  }
  return timeoutMs;
}

/** The refusal of `given` as `what` (an action, a status, a kind), which is one of `names`. */
function unknownName(reason, what, names, given) {
  return refused(reason, `${what} must be one of ${[...names].join(', ')}; got ${shown(given)}`);
}

/** The parameter names of `fn` as its source spells them (a destructured one: 'options'). */
function parameterNames(fn) {
  const source = fn.toString();
  const names = [];
  let depth = 0;
  let current = '';
  for (let at = source.indexOf('(') + 1; at < source.length; at += 1) {
    const c = source[at];
    if (depth === 0 && (c === ',' || c === ')')) {
      const name = current.trim().split('=')[0].trim();
      if (name) names.push(/^[A-Za-z_$][\w$]*$/.test(name) ? name : 'options');
      current = '';
      if (c === ')') break;
      continue;
    }
    if ('([{'.includes(c)) depth += 1;
    else if (')]}'.includes(c)) depth -= 1;
    current += c;
  }
  return names;
}

/** What a value is, for a message: 'null', 'a list', 'a string', ... */
function kindOf(value) {
  const names = { object: 'an object', boolean: 'a boolean', undefined: 'undefined' };
  return value === null ? 'null' : Array.isArray(value) ? 'a list' : names[typeof value] ?? `a ${typeof value}`;
}

/**
 * `options` when it can be a method's options object (undefined: none), else REQUEST_UNDECODABLE
 * naming `where`: destructuring null threw JS's own TypeError ("Cannot read properties of null"),
 * and a string or a number silently gave every option its default.
 */
function optionsObject(options, where) {
  if (options === undefined || (typeof options === 'object' && options !== null && !Array.isArray(options))) return options;
  throw refused('REQUEST_UNDECODABLE', `${where}: options is ${kindOf(options)}; it takes an object of options, or nothing`);
}

/**
 * A constructor's whole-number option: `fallback` when not given, else `value` when it is a whole
 * number from `low` to `high`; refused NUMBER_INVALID naming `where` otherwise (retries: -1 tried
 * no call, 1e9 kept a caller waiting for days on a server that is gone, 'x' and 1.5 were taken).
 */
function wholeOption(value, fallback, low, high, where) {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < low || value > high) {
    throw refused('NUMBER_INVALID', `${where} is ${shown(value)}; it takes a whole number from ${low} to ${high}`);
  }
  return value;
}

/** A constructor's flag option: `fallback` when not given, else `value` when it is a boolean. */
function flagOption(value, fallback, where) {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean') throw refused('REQUEST_UNDECODABLE', `${where} is ${kindOf(value)}; it takes true or false`);
  return value;
}

/** The refusal of a call of `name` whose arguments no request can carry, or null. */
function argumentsProblem(name, names, required, args) {
  for (let i = 0; i < required; i += 1) {
    if (args[i] == null) {
      return refused('REQUEST_UNDECODABLE', `${name}: ${names[i] ?? `argument ${i + 1}`} is ${kindOf(args[i])}; it is required`);
    }
  }
  if (names.length > required && names[required] === 'options') {
    try {
      optionsObject(args[required], name);
    } catch (err) {
      return err;
    }
  }
  return null;
}

/**
 * `args` with the options object's null values left out, so that each such option takes its
 * default as an undefined one does (and as the Python client's None does): destructuring
 * defaults only undefined, so `{requestId: null}` sent no request id (and was never retried) and
 * `{metadata: null}` cleared a memory's metadata, where the same None keeps it.
 */
function nullsAsNotGiven(names, required, args) {
  const options = args[required];
  if (names[required] !== 'options' || options == null || !Object.values(options).includes(null)) return args;
  const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== null));
  return [...args.slice(0, required), given, ...args.slice(required + 1)];
}

/**
 * `cls` with each public method (own, not starting with '_') checking its arguments before it
 * runs, in one place for every method: a required argument (one before the first with a default)
 * that is null or undefined, and an options object that is not one, are refused
 * REQUEST_UNDECODABLE naming the method and the argument; an option given null is not given
 * (`nullsAsNotGiven`). An async method rejects, an async generator throws at its first step, a
 * plain one throws. `except`: methods left as they are.
 */
function checkingArguments(cls, except = []) {
  for (const name of Object.getOwnPropertyNames(cls.prototype)) {
    const method = cls.prototype[name];
    if (name === 'constructor' || name.startsWith('_') || except.includes(name) || typeof method !== 'function') continue;
    const names = parameterNames(method);
    const required = method.length;
    const kind = method.constructor.name; // AsyncFunction, AsyncGeneratorFunction, Function
    let checked;
    if (kind === 'AsyncGeneratorFunction') {
      checked = async function* checkedSteps(...args) {
        const problem = argumentsProblem(name, names, required, args);
        if (problem) throw problem;
        yield* method.apply(this, nullsAsNotGiven(names, required, args));
      };
    } else if (kind === 'AsyncFunction') {
      checked = async function checkedCall(...args) {
        const problem = argumentsProblem(name, names, required, args);
        if (problem) throw problem;
        return method.apply(this, nullsAsNotGiven(names, required, args));
      };
    } else {
      checked = function checkedCall(...args) {
        const problem = argumentsProblem(name, names, required, args);
        if (problem) throw problem;
        return method.apply(this, nullsAsNotGiven(names, required, args));
      };
    }
    Object.defineProperty(checked, 'name', { value: name });
    Object.defineProperty(checked, 'length', { value: required });
    Object.defineProperty(checked, 'toString', { value: () => method.toString() }); // its parameters, as written
    Object.defineProperty(cls.prototype, name, { value: checked, writable: true, configurable: true });
  }
  return cls;
}

module.exports = {
  checkingArguments, optionsObject, wholeOption, flagOption,
  RequestInvalidError, refused, shown, checkedRequest, checkedSize, checkedTimeoutMs, timestampFrom, timestampFromDateOrSeconds, timeReason, integer, unknownName,
  listOf, shapeless, MAX_TIMEOUT_MS,
};
