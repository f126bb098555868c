'use strict';
// Mnemosyne for Node.js: a promise-based client and the host side of host-owned generations.
const {
  MemoryClient, newRequestId, GLOBAL_GENERATION_KEY, WORKSPACE_GENERATION_KEY, WEBHOOK_KINDS,
} = require('./client');
const {
  MnemosyneError, TokenInvalidError, TokenForeignError, TimelineChangedError, ConsistencyDeadlineExceededError, fromServiceError,
} = require('./errors');
const { MemoryHost, renderContext } = require('./host');
const { RequestInvalidError } = require('./unsendable');
const { ownerOf } = require('./routing');

module.exports = {
  MemoryClient, MemoryHost, MnemosyneError, fromServiceError,
  RequestInvalidError, TokenInvalidError, TokenForeignError, TimelineChangedError, ConsistencyDeadlineExceededError, renderContext, newRequestId,
  GLOBAL_GENERATION_KEY, WORKSPACE_GENERATION_KEY, WEBHOOK_KINDS, ownerOf,
};
