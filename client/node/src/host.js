'use strict';
// MemoryHost: the agent-runtime side of host-owned generations, for Node.js.
//
// Implemented from the protocol (docs/host-protocol.md, and the header of
// protos/mnemosyne/v1/workspace.proto):
// - an observation (the exact Global and Workspace generations of one assembly) exists only after
//   assembleContext() for that live agent object, and is held in a WeakMap keyed by the object, so
//   it goes with the agent; a new host or a resumed agent must assemble before it can write;
// - a tool call reads the agent's observation ONCE, at entry, and sends exactly that generation as
//   request metadata; missing observation -> an `error` result, nothing sent;
// - the new generation comes from the trailing metadata; the written scope's observation advances
//   only if it is still the value that call read (compare-and-set per scope), so a concurrent call
//   whose content came from the old snapshot is never carried forward, and an advance of one scope
//   never undoes the other's;
// - GENERATION_MISMATCH (read from the ErrorInfo in the status details) -> an `error` result
//   (reason STALE_CONTEXT) asking the model to assemble again; the host never fetches the latest generation to retry by itself;
// - nothing the model sees (context text, tool schemas, tool results) contains a generation.
const grpc = require('@grpc/grpc-js');
const { newRequestId } = require('./client');
const { MnemosyneError } = require('./errors');
const { checkingArguments, optionsObject } = require('./unsendable');

const MEMORY_UPDATE = 'memory_update';
const UPDATE_WORKSPACE = 'update_workspace';
// Reasons in tool results are visible to the model, so they name the situation, not the
// mechanism (docs/host-protocol.md section 6: no "generation" word).
const STALE_REASON = 'STALE_CONTEXT';
const MISSING_REASON = 'CONTEXT_NOT_ASSEMBLED';
const UNAVAILABLE_REASON = 'MEMORY_UNAVAILABLE';
const STALE_MESSAGE = 'memory changed since your context was assembled; assemble context again';
const MISSING_MESSAGE = 'no memory context has been assembled for this agent yet; assemble context again before writing memory';
const UNAVAILABLE_MESSAGE = 'the memory service did not answer, so this change may not have been saved; '
  + 'assemble context again and check before repeating it';

const PARAMETERS = {
  [MEMORY_UPDATE]: {
    type: 'object',
    properties: {
      content: {
        type: 'string',
        description: 'The complete new text of the global memory document MEMORY.md. It replaces the whole '
          + 'document, so include everything that should remain.',
      },
    },
    required: ['content'],
    additionalProperties: false,
  },
  [UPDATE_WORKSPACE]: {
    type: 'object',
    properties: {
      changes: {
        type: 'array',
        minItems: 1,
        maxItems: 100,
        description: 'Changes applied together, all or nothing.',
        items: {
          type: 'object',
          properties: {
            op: { type: 'string', enum: ['put', 'delete'], description: 'put: create or replace the record; delete: remove it.' },
            key: { type: 'string', description: 'Record name, a relative path such as plan.md or notes/plan.md.' },
            content: { type: 'string', description: 'The complete new text of the record (put only).' },
          },
          required: ['op', 'key'],
          additionalProperties: false,
        },
      },
    },
    required: ['changes'],
    additionalProperties: false,
  },
};
const DESCRIPTIONS = {
  [MEMORY_UPDATE]: 'Replace the global memory document (MEMORY.md) shown in your context with new complete content.',
  [UPDATE_WORKSPACE]: 'Create, replace or delete records of the current workspace shown in your context. '
    + 'All changes of one call are applied together.',
};

// A mistake in the model's arguments has the reason every surface gives it (docs/http-api.md, "One
// mistake, one reason"; the Python host's service/host/model_tools.py is the same rule): what cannot
// be read as the argument (not JSON, no object, a value of another JSON type, an argument or field
// a tool does not take) REQUEST_UNDECODABLE; a field read but outside its own limits the reason gRPC
// gives it (CHANGES_EMPTY, CHANGE_OP_INVALID, RECORD_KEY_INVALID); ARGUMENTS_INVALID where no
// surface has one (an unknown tool; a content left out). null is a field not given.
const UNDECODABLE = 'REQUEST_UNDECODABLE';
const EXAMPLE = '[{"op": "put", "key": "plan.md", "content": "..."}]';
// What each field of a change takes, for the refusal of a value of another JSON type.
const CHANGE_TAKES = { op: '"put" or "delete"', key: 'a record name such as plan.md', content: "the record's text" };

class ModelArgumentError extends Error {
  constructor(message, reason = 'ARGUMENTS_INVALID') {
    super(message);
    this.reason = reason;
  }
}

function errorResult(message, reason) {
  return { ok: false, error: message, reason };
}

/** The JSON type of `value` as a refusal names it. */
function kindOf(value) {
  if (value == null) return 'null';
  if (typeof value === 'boolean') return 'true or false';
  if (typeof value === 'number') return 'a number';
  if (typeof value === 'string') return 'a string';
  return Array.isArray(value) ? 'a list' : 'an object';
}

/** `value` when it is a string or not given (null, undefined: null), else refused REQUEST_UNDECODABLE. */
function textOrNone(value, what, takes) {
  if (value == null) return null;
  if (typeof value !== 'string') throw new ModelArgumentError(`${what} is ${kindOf(value)}; it takes ${takes}, as a string`, UNDECODABLE);
  return value;
}

function parseArguments(name, args) {
  if (typeof name !== 'string' || !Object.hasOwn(PARAMETERS, name)) { // 'constructor', 'toString': no tool of ours
    // Names the model invented are never echoed back (they may be revision-like).
    throw new ModelArgumentError(`unknown tool; the memory tools are ${MEMORY_UPDATE} and ${UPDATE_WORKSPACE}`);
  }
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args || '{}');
    } catch {
      throw new ModelArgumentError(`the arguments of ${name} are not valid JSON`, UNDECODABLE);
    }
  }
  if (args == null) args = {};
  if (typeof args !== 'object' || Array.isArray(args)) {
    throw new ModelArgumentError(`the arguments of ${name} must be a JSON object, not ${kindOf(args)}`, UNDECODABLE);
  }
  const allowed = Object.keys(PARAMETERS[name].properties);
  if (Object.keys(args).some((k) => !allowed.includes(k))) {
    throw new ModelArgumentError(`${name} takes exactly one argument, ${allowed.join(', ')}, and nothing else`, UNDECODABLE);
  }
  if (name === MEMORY_UPDATE) {
    const content = textOrNone(args.content, 'memory_update: content', 'the complete new text of MEMORY.md');
    if (content === null) throw new ModelArgumentError('memory_update needs content: the complete new text of MEMORY.md, as a string');
    return content;
  }
  const { changes } = args;
  if (changes == null || (Array.isArray(changes) && changes.length === 0)) {
    throw new ModelArgumentError(`update_workspace needs changes: a non-empty list like ${EXAMPLE}`, 'CHANGES_EMPTY');
  }
  if (!Array.isArray(changes)) {
    throw new ModelArgumentError(`update_workspace: changes is ${kindOf(changes)}; it takes a non-empty list like ${EXAMPLE}`, UNDECODABLE);
  }
  return changes.map((change, i) => parseChange(i, change));
}

function parseChange(i, change) {
  if (change == null || typeof change !== 'object' || Array.isArray(change)) {
    throw new ModelArgumentError(`change ${i} is ${kindOf(change)}; it takes an object with op, key and (for put) content`, UNDECODABLE);
  }
  if (Object.keys(change).some((k) => !Object.hasOwn(CHANGE_TAKES, k))) {
    throw new ModelArgumentError(`change ${i} may only have op, key and content`, UNDECODABLE);
  }
  const [op, key, content] = Object.entries(CHANGE_TAKES).map(([field, takes]) => textOrNone(change[field], `change ${i}: ${field}`, takes));
  if (op !== 'put' && op !== 'delete') throw new ModelArgumentError(`change ${i}: op must be "put" or "delete"`, 'CHANGE_OP_INVALID');
  if (!key) throw new ModelArgumentError(`change ${i}: key must be a record name such as plan.md`, 'RECORD_KEY_INVALID');
  if (op === 'put' && content === null) throw new ModelArgumentError(`change ${i}: a put needs content, the complete text of the record, as a string`);
  if (op === 'delete' && content) throw new ModelArgumentError(`change ${i}: a delete takes no content`, 'CHANGE_OP_INVALID');
  return { op, key, content: op === 'put' ? content : '' };
}

function renderRecords(records) {
  if (!records.length) return ['(empty)'];
  return records.flatMap((r) => ['', `## ${r.key}`, r.content.replace(/\n+$/, '')]);
}

/** Prompt text of an assembly: records and memories only (no generation, by construction). */
function renderContext(assembled, workspace) {
  const lines = ['# Global memory', ...renderRecords(assembled.globalRecords), '', `# Workspace ${workspace}`,
    ...renderRecords(assembled.workspaceRecords)];
  if (assembled.memories.length) lines.push('', '# Recalled memories', ...assembled.memories.map((h) => `- ${h.memory.text}`));
  return `${lines.join('\n')}\n`;
}

class MemoryHost {
  /**
   * @param {import('./client').MemoryClient} client
   * @param {string} tenant
   * @param {{observations?: WeakMap<object, object>}} [options] share `observations` between hosts
   *   of one process if they serve the same agents; by default each host has its own.
   */
  constructor(client, tenant, options = {}) {
    optionsObject(options, 'MemoryHost');
    this.client = client;
    this.tenant = tenant;
    this.observations = options.observations ?? new WeakMap();
  }

  /**
   * The memory part of the agent's prompt; records the generations it was read at. It waits for
   * the client's own writes of the tenant still queued (`k` and `consistencyToken`: as for recall).
   */
  async assembleContext(agent, workspace, { query = '', k = 0, consistencyToken } = {}) {
    if (agent === null || (typeof agent !== 'object' && typeof agent !== 'function')) {
      throw new TypeError('an agent must be an object (observations are held per live agent object)');
    }
    const assembled = await this.client.assembleContext(this.tenant, workspace, { query, k, consistencyToken });
    this.observations.set(agent, Object.freeze({
      globalGeneration: assembled.globalGeneration,
      workspace,
      workspaceGeneration: assembled.workspaceGeneration,
    }));
    return renderContext(assembled, workspace);
  }

  /** Function-calling schemas (`openai` or `anthropic`); no revision/generation/hash/etag field. */
  static toolSchemas(format = 'openai') {
    const names = [MEMORY_UPDATE, UPDATE_WORKSPACE];
    if (format === 'openai') {
      return names.map((n) => ({ type: 'function', function: { name: n, description: DESCRIPTIONS[n], parameters: PARAMETERS[n] } }));
    }
    if (format === 'anthropic') return names.map((n) => ({ name: n, description: DESCRIPTIONS[n], input_schema: PARAMETERS[n] }));
    throw new RangeError(`format must be 'openai' or 'anthropic', not ${JSON.stringify(format)}`);
  }

  /**
   * Run one model tool call. Resolves {ok: true, result} or {ok: false, error, reason}; never a
   * generation, never a rejection for what the model sent.
   */
  async callTool(agent, name, args) {
    const observation = this.observations.get(agent); // once, at entry: this call's precondition
    let parsed;
    try {
      parsed = parseArguments(name, args);
    } catch (err) {
      if (err instanceof ModelArgumentError) return errorResult(err.message, err.reason);
      throw err;
    }
    if (observation === undefined) return errorResult(MISSING_MESSAGE, MISSING_REASON);
    const requestId = newRequestId(); // fresh per tool call
    try {
      if (name === MEMORY_UPDATE) {
        const generation = await this.client.updateGlobal(this.tenant, parsed,
          { observedGeneration: observation.globalGeneration, requestId });
        this._advance(agent, observation, 'global', generation);
        return { ok: true, result: 'MEMORY.md was replaced.' };
      }
      const { generation } = await this.client.updateWorkspace(this.tenant, observation.workspace, parsed,
        { observedGeneration: observation.workspaceGeneration, requestId });
      this._advance(agent, observation, 'workspace', generation);
      return { ok: true, result: `${parsed.length} change(s) applied to workspace ${observation.workspace}.` };
    } catch (err) {
      if (!(err instanceof MnemosyneError)) throw err;
      if (err.code === grpc.status.ABORTED && err.reason === 'GENERATION_MISMATCH') return errorResult(STALE_MESSAGE, STALE_REASON);
      if (err.code === grpc.status.FAILED_PRECONDITION && err.reason === 'OBSERVATION_MISSING') return errorResult(MISSING_MESSAGE, MISSING_REASON);
      // Anything else (e.g. GENERATION_METADATA_INVALID: a success without the trailing key) is a
      // host or server fault, thrown to the host's code; the observation was not advanced, so the
      // agent's next write fails stale rather than guessing a generation.
      if ([grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND, grpc.status.RESOURCE_EXHAUSTED].includes(err.code)) {
        return errorResult(err.details, err.reason); // about the model's arguments; names no generation
      }
      if ([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED].includes(err.code)) return errorResult(UNAVAILABLE_MESSAGE, UNAVAILABLE_REASON);
      throw err;
    }
  }

  /**
   * Compare-and-set per scope (docs/host-protocol.md section 5 rule 6): advance the written
   * scope only if the agent's current observation of that scope is still the value this call read
   * at entry; the other scope's value is never touched. JavaScript runs this synchronously, so
   * the read-compare-write cannot interleave with another call's.
   */
  _advance(agent, read, scope, generation) {
    const current = this.observations.get(agent);
    if (current === undefined) return;
    if (scope === 'global' && current.globalGeneration === read.globalGeneration) {
      this.observations.set(agent, Object.freeze({ ...current, globalGeneration: generation }));
    } else if (scope === 'workspace' && current.workspace === read.workspace
      && current.workspaceGeneration === read.workspaceGeneration) {
      this.observations.set(agent, Object.freeze({ ...current, workspaceGeneration: generation }));
    }
  }
}

// callTool answers whatever a model sent it with {ok: false, ...}, never a refusal.
checkingArguments(MemoryHost, ['callTool']);

module.exports = {
  MemoryHost, renderContext, MEMORY_UPDATE, UPDATE_WORKSPACE, STALE_MESSAGE, MISSING_MESSAGE, STALE_REASON, MISSING_REASON,
};
