'use strict';
// Typed errors of the Node client: the gRPC status code plus the stable reason the server puts in
// the google.rpc.ErrorInfo of the google.rpc.Status carried by the `grpc-status-details-bin`
// trailer (AIP-193). Branch on `reason`, never on the message text.
const grpc = require('@grpc/grpc-js');
const { loadStatusTypes } = require('./protos');

const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
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
    super(`${grpc.status[code] ?? code} ${reason}: ${message}`);
    this.name = 'MnemosyneError';
    this.code = code;
    this.codeName = grpc.status[code] ?? String(code);
    this.reason = reason;
    this.details = message;
    this.metadata = metadata;
    this.domain = domain;
  }
}

/** The ErrorInfo in a `grpc-status-details-bin` value, or null when there is none. */
function errorInfoFromStatusDetails(bytes) {
  const { Status, ErrorInfo } = loadStatusTypes();
  const status = Status.decode(bytes);
  for (const detail of status.details || []) {
    if (detail.type_url === ERROR_INFO_TYPE) {
      const info = ErrorInfo.toObject(ErrorInfo.decode(detail.value), { defaults: true });
      return { reason: info.reason, domain: info.domain, metadata: { ...info.metadata } };
    }
  }
  return null;
}

/** A grpc-js ServiceError as a MnemosyneError, reading the reason from the status details. */
function fromServiceError(err) {
  if (!err || typeof err.code !== 'number') return err;
  const values = err.metadata ? err.metadata.get(STATUS_DETAILS_KEY) : [];
  let info = null;
  if (values.length > 0) {
    try {
      info = errorInfoFromStatusDetails(Buffer.isBuffer(values[0]) ? values[0] : Buffer.from(values[0]));
    } catch {
      info = null; // undecodable details: keep the code, no reason
    }
  }
  const error = new MnemosyneError(err.code, info ? info.reason : '', err.details ?? err.message,
    info ? info.metadata : {}, info ? info.domain : '');
  error.cause = err;
  return error;
}

module.exports = { MnemosyneError, fromServiceError, errorInfoFromStatusDetails, STATUS_DETAILS_KEY };
