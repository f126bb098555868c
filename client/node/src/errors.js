'use strict';
// Typed errors of the Node client: the gRPC status code plus the stable reason the server puts in
// the google.rpc.ErrorInfo of the google.rpc.Status carried by the `grpc-status-details-bin`
// trailer (AIP-193). Branch on `reason`, never on the message text. A google.rpc.RetryInfo in the
// same details (the server's "try again after") is kept as `retryDelayMs`.
//
// The consistency-token refusals (docs/hot-path.md "Read your own writes") have classes of their
// own under MnemosyneError, for a token the caller passed and for the session's token alike:
//   TokenInvalidError     INVALID_ARGUMENT TOKEN_INVALID: a token this tenant's server did not issue
//   TokenForeignError     INVALID_ARGUMENT TOKEN_FOREIGN: another tenant's token
//   TimelineChangedError  FAILED_PRECONDITION TIMELINE_CHANGED: the tenant was restored or replaced since
//   ConsistencyDeadlineExceededError  DEADLINE_EXCEEDED CONSISTENCY_DEADLINE_EXCEEDED: the token's
//                         writes were still open at the deadline (metadata open_event_ids)
// After the first three the client has dropped its session token for the tenant: the writes it
// named are gone, so read again (the next read waits for nothing) and write again what you still
// need. After a deadline the token is kept: call again with a longer deadline, or with
// `consistencyToken: ''`.
const grpc = require('@grpc/grpc-js');
const { loadStatusTypes } = require('./protos');

const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
const RETRY_INFO_TYPE = 'type.googleapis.com/google.rpc.RetryInfo';
const STATUS_DETAILS_KEY = 'grpc-status-details-bin';

class MnemosyneError extends Error {
  /**
   * @param {number} code gRPC status code (grpc.status.*)
   * @param {string} reason ErrorInfo reason, e.g. GENERATION_MISMATCH ('' when the server sent none)
   * @param {string} message the server's message for people
   * @param {Record<string,string>} metadata ErrorInfo metadata
   * @param {string} domain ErrorInfo domain (mnemosyne.v1)
   */
  constructor(code, reason, message, metadata = {}, domain = '') {
    const name = grpc.status[code] ?? code;
    // A transport failure carries no ErrorInfo: the code is said once, with no empty reason.
    super(`${reason && reason !== name ? `${name} ${reason}` : name}: ${message}`);
    this.name = new.target.name; // 'MnemosyneError', or the subclass of its reason
    this.code = code;
    this.codeName = grpc.status[code] ?? String(code);
    this.reason = reason;
    this.details = message;
    this.metadata = metadata;
    this.domain = domain;
    /** The RetryInfo retry_delay in milliseconds, or null when the server sent none. */
    this.retryDelayMs = null;
  }
}

class TokenInvalidError extends MnemosyneError {}
class TokenForeignError extends MnemosyneError {}
class TimelineChangedError extends MnemosyneError {}
class ConsistencyDeadlineExceededError extends MnemosyneError {}

// `${code} ${reason}` -> the class of that refusal.
const BY_REASON = new Map([
  [`${grpc.status.INVALID_ARGUMENT} TOKEN_INVALID`, TokenInvalidError],
  [`${grpc.status.INVALID_ARGUMENT} TOKEN_FOREIGN`, TokenForeignError],
  [`${grpc.status.FAILED_PRECONDITION} TIMELINE_CHANGED`, TimelineChangedError],
  [`${grpc.status.DEADLINE_EXCEEDED} CONSISTENCY_DEADLINE_EXCEEDED`, ConsistencyDeadlineExceededError],
]);

/** A google.protobuf.Duration ({seconds, nanos}, seconds as a string or Long) in milliseconds. */
function durationMs(duration) {
  if (!duration) return 0;
  return Number(duration.seconds ?? 0) * 1000 + Number(duration.nanos ?? 0) / 1e6;
}

/**
 * The ErrorInfo and RetryInfo in a `grpc-status-details-bin` value: {errorInfo, retryDelayMs},
 * each null when absent. A status, or a detail, that cannot be decoded (a broken server's) is as
 * none, the other details kept, as the Python client takes them (client/errors.py `_detail`).
 */
function statusDetails(bytes) {
  const { Status, ErrorInfo, RetryInfo } = loadStatusTypes();
  let errorInfo = null;
  let retryDelayMs = null;
  let status;
  try {
    status = Status.decode(bytes);
  } catch {
    return { errorInfo, retryDelayMs };
  }
  for (const detail of status.details || []) {
    try {
      if (detail.type_url === ERROR_INFO_TYPE && errorInfo === null) {
        const info = ErrorInfo.toObject(ErrorInfo.decode(detail.value), { defaults: true });
        errorInfo = { reason: info.reason, domain: info.domain, metadata: { ...info.metadata } };
      } else if (detail.type_url === RETRY_INFO_TYPE && retryDelayMs === null) {
        const info = RetryInfo.toObject(RetryInfo.decode(detail.value), { longs: String });
        retryDelayMs = Math.max(0, durationMs(info.retry_delay));
      }
    } catch {
      // this detail is as none: the next of its type, if any, is taken
    }
  }
  return { errorInfo, retryDelayMs };
}

/** The ErrorInfo in a `grpc-status-details-bin` value, or null when there is none. */
function errorInfoFromStatusDetails(bytes) {
  return statusDetails(bytes).errorInfo;
}

// Codes a call ends with, without an ErrorInfo, when what answered at the address is no Mnemosyne
// server: nothing listening, an HTTP/1 server, a TLS mismatch (UNAVAILABLE); a gRPC server of
// other services (UNIMPLEMENTED).
const NOT_MNEMOSYNE = new Set([grpc.status.UNAVAILABLE, grpc.status.UNIMPLEMENTED]);

/**
 * A grpc-js ServiceError as a MnemosyneError, reading the reason from the status details.
 * `target`: the address the call went to; a failure that did not come from a Mnemosyne server
 * (no ErrorInfo) then asks whether one listens there, with gRPC's own words after it. The code
 * and reason stay those of the failure.
 */
function fromServiceError(err, target = '') {
  if (!err || typeof err.code !== 'number') return err;
  const values = err.metadata ? err.metadata.get(STATUS_DETAILS_KEY) : [];
  const details = values.length > 0
    ? statusDetails(Buffer.isBuffer(values[0]) ? values[0] : Buffer.from(values[0]))
    : { errorInfo: null, retryDelayMs: null };
  const info = details.errorInfo;
  let message = err.details ?? err.message;
  if (!info && target && NOT_MNEMOSYNE.has(err.code)) message = `is a Mnemosyne server listening at ${target}? (${message})`;
  const reason = info ? info.reason : '';
  const Class = BY_REASON.get(`${err.code} ${reason}`) ?? MnemosyneError;
  const error = new Class(err.code, reason, message, info ? info.metadata : {}, info ? info.domain : '');
  error.retryDelayMs = details.retryDelayMs;
  error.cause = err;
  return error;
}

module.exports = {
  MnemosyneError,
  TokenInvalidError,
  TokenForeignError,
  TimelineChangedError,
  ConsistencyDeadlineExceededError,
  fromServiceError, errorInfoFromStatusDetails, statusDetails, STATUS_DETAILS_KEY, ERROR_INFO_TYPE, RETRY_INFO_TYPE,
};
