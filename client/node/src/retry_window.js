'use strict';
// When the client tries a call again, and for how long: the Python client's rules and numbers
// (client/retry_window.py). A call safe to repeat (a read, a write carrying a request id) that
// fails UNAVAILABLE is tried again until it succeeds or its retry window (`retryWindowMs`, 15 s by
// default) is over, never past the call's own deadline: a server's restart (a Kubernetes pod's, a
// SIGKILL and start again) takes seconds, and a call in flight across it is answered by the server
// back; one to a server that stays gone fails within the window. Between tries a backoff from
// 100 ms, doubling, at most 1 s, each wait a random half to all of it (the clients of a restarted
// server do not come back in step). A refusal the server names (an UNAVAILABLE with its ErrorInfo
// reason) is the server's word on whether waiting can clear it: tried again only when it names a
// retry delay (google.rpc.RetryInfo: TENANT_MOVING, OWNER_UNAVAILABLE, FILE_LIMIT, SHUTTING_DOWN,
// TENANT_BUSY, MEMBERS_CHANGING, REPLICA_UNREACHABLE while object storage does not answer, an
// admission limit), after that delay (at most `maxRetryDelayMs`), within the same window; one
// without (REPLICA_UNREACHABLE for a replica URL or keys that are wrong) is thrown at once. Only a
// failure without ErrorInfo (the server down or restarting) takes the backoff, and the reasons of
// `CLEARED_BY_WAITING` without a delay: servers up to 0.1.0 sent them so.
// RESOURCE_EXHAUSTED without a RetryInfo (a quota) is final.
const grpc = require('@grpc/grpc-js');
const { MnemosyneError } = require('./errors');

const DEFAULT_RETRY_WINDOW_MS = 15000;
const MAX_RETRY_WINDOW_MS = 3600 * 1000; // more only keeps a caller waiting on a server that is gone
const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 1000;
// UNAVAILABLE reasons that waiting clears, which servers up to 0.1.0 sent without a retry delay
// (later ones send one): tried with the backoff, as a restart, so a client newer than its server
// still rides out a shutdown or a tenant busy (client/retry_window.py keeps the same).
const CLEARED_BY_WAITING = new Set(['SHUTTING_DOWN', 'TENANT_BUSY', 'ERASURE_BUSY', 'FILE_LIMIT', 'TENANT_ERASING', 'TENANT_MOVING']);

/**
 * The tries of one call: the time left of its deadline (`timeoutMs` from now; null: none) and the
 * waits before its next try, within `windowMs` from now and at most `retries` of them (null: as
 * many as the window holds), each RetryInfo delay at most `maxRetryDelayMs`.
 */
class RetryBudget {
  constructor({ windowMs, retries, maxRetryDelayMs }, timeoutMs) {
    const now = Date.now();
    this._ends = timeoutMs == null ? Infinity : now + timeoutMs;
    this._windowEnds = Math.min(now + windowMs, this._ends);
    this._retries = retries ?? Infinity;
    this._maxRetryDelayMs = maxRetryDelayMs;
    this._tried = 0;
    this._backoffMs = FIRST_BACKOFF_MS;
  }

  /** The milliseconds left of the call's deadline, for its next try's (null: no deadline). */
  leftMs() {
    return this._ends === Infinity ? null : Math.max(this._ends - Date.now(), 0);
  }

  /**
   * The milliseconds to wait before the call is tried again after `err`, or null: not again
   * (another failure, the retries or the window spent). The caller knows the call is safe to repeat.
   */
  waitAfter(err) {
    if (!(err instanceof MnemosyneError)) return null;
    let wait;
    const named = err.reason !== '' && err.reason !== 'UNAVAILABLE'; // the server's ErrorInfo: no failed connection
    if (err.code === grpc.status.UNAVAILABLE && !err.retryDelayMs && (!named || CLEARED_BY_WAITING.has(err.reason))) {
      wait = this._backoffMs * (0.5 + Math.random() / 2);
      this._backoffMs = Math.min(2 * this._backoffMs, MAX_BACKOFF_MS);
    } else if ((err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.RESOURCE_EXHAUSTED) && err.retryDelayMs !== null) {
      wait = Math.min(err.retryDelayMs, this._maxRetryDelayMs);
    } else {
      return null;
    }
    if (this._tried >= this._retries || Date.now() + wait >= this._windowEnds) return null;
    this._tried += 1;
    return wait;
  }
}

module.exports = { RetryBudget, DEFAULT_RETRY_WINDOW_MS, MAX_RETRY_WINDOW_MS };
