// Type declarations of @mnemosyne/node-host (src/index.js), for TypeScript hosts.
// test/types.test.js compiles test/types/usage.ts against them with `tsc --strict` and checks that
// every class method and export declared here exists at runtime, and the other way round.
import type { ChannelCredentials } from '@grpc/grpc-js';

export declare const GLOBAL_GENERATION_KEY: 'mnemosyne-global-generation';
export declare const WORKSPACE_GENERATION_KEY: 'mnemosyne-workspace-generation';

/** A fresh idempotency key (32 hex characters). */
export declare function newRequestId(): string;

export interface ClientOptions {
  /** Bearer token sent as `authorization` metadata. */
  token?: string;
  /** Default: insecure (plaintext) credentials. */
  credentials?: ChannelCredentials;
  /** Deadline of each call, in milliseconds (default 30000). */
  timeoutMs?: number;
  /**
   * Every member of a deployment of many ('ID=HOST:PORT,...' or '@FILE', as `mnemosyne serve
   * --members` takes it, or {id: address}): each call then goes straight to the member owning its
   * tenant (docs/scale-out.md); `target` serves the calls that name no tenant ('' = the first
   * member, the smallest id). A list that cannot be used throws a RequestInvalidError whose `reason`
   * (and `problem`) says why (MEMBER_ID_INVALID, MEMBER_LISTED_TWICE, ...).
   */
  members?: string | Record<string, string> | Map<string, string>;
  /**
   * For how long, in milliseconds, a call that is safe to repeat (a read, or a write with a
   * request id) is tried again after UNAVAILABLE or after RESOURCE_EXHAUSTED with a RetryInfo
   * (default 15000, 0 to 3600000; never past the call's `timeoutMs`): a call in flight across a
   * restart of the server is answered by the server back, one to a server that stays gone fails
   * within it. Between tries a backoff from 100 ms, doubling, at most 1 s, jittered, or the
   * RetryInfo's delay.
   */
  retryWindowMs?: number;
  /**
   * At most how many times such a call is tried again within the window (0 to 100; 0: never;
   * default: as many as the window holds).
   */
  retries?: number;
  /** The longest RetryInfo retry_delay waited before a repeat, in milliseconds (default 5000). */
  maxRetryDelayMs?: number;
  /**
   * Session consistency (default true): keep the newest consistency token of each tenant this
   * client wrote and send it with the client's next reads and writes of that tenant, so the client
   * reads its own writes, fast ones included (docs/polyglot.md).
   */
  sessionConsistency?: boolean;
  /** How many tenants' tokens are kept (default 10000); the least recently used is forgotten first. */
  sessionTenants?: number;
  /**
   * The largest message sent, in bytes (default 16 MiB, the server's default --max-request-bytes;
   * raise it with the server's): a larger one is refused REQUEST_TOO_LARGE before it is sent (a
   * request, a stream's, each of an import's messages: a chunk's refusal cancels the import).
   */
  maxRequestBytes?: number;
}

/**
 * A read's consistency: undefined waits for this client's own writes of the tenant (session
 * consistency), '' for none, a token (another client's `consistencyToken(tenant)`) for the writes
 * it names.
 */
export type ConsistencyToken = string | undefined;

export type RetainStatus = 'created' | 'duplicate' | 'enqueued' | 'invalid' | 'unspecified';

/** int64 ids arrive as decimal strings (exact above 2^53): pass them back as they are. */
export type Id = string;

export interface RetainResult {
  status: RetainStatus;
  memoryId: Id;
  eventId: Id;
  errorReason: string;
  errorMessage: string;
}

export interface Fact {
  kind: string;
  value: string;
  normalized: string;
}

export interface Triple {
  subject: string;
  predicate: string;
  object: string;
}

export interface Memory {
  id: Id;
  scope: string;
  text: string;
  metadata: Record<string, string>;
  facts: Fact[];
  triples: Triple[];
  forgotten: boolean;
  /** When it was said or happened, if retained with it. */
  occurredAt: Date | null;
  thread: ThreadRef | null;
  /** Who said or wrote it ('' when not given). */
  speaker: string;
  /** When it expires (docs/expiry.md); null: never. */
  expiresAt: Date | null;
}

/**
 * A time as unix seconds or a Date, from 0001-01-01 to 9999-12-31 UTC (a RequestInvalidError
 * EXPIRES_AT_INVALID otherwise, before anything is sent; REQUEST_UNDECODABLE for another type).
 */
export type ExpiresAt = Date | number;

/** A memory's place in a conversation: the thread's id and a position in it (ints as strings). */
export interface ThreadRef {
  id: string;
  position: Id | number | bigint;
}

export interface RecallHit {
  memory: Memory;
  score: number;
}

export interface WorkspaceRecord {
  key: string;
  content: string;
}

export interface AssembledContext {
  globalRecords: WorkspaceRecord[];
  workspaceRecords: WorkspaceRecord[];
  memories: RecallHit[];
  /** Recalled memories the server left out to keep its response under ~3 MiB. */
  omittedMemoryIds: Id[];
  /** Exact int64 generations from the response metadata. */
  globalGeneration: bigint;
  workspaceGeneration: bigint;
}

export type HotPathAction = 'enable' | 'disable' | 'status' | 'flush';

/** HotPathService.Status (and what Enable and Disable resolve). */
export interface HotPathStatus {
  enabled: boolean;
  queueDepth: number;
  oldestPendingSeconds: number;
  accepted: number;
  succeeded: number;
  failed: number;
  duplicates: number;
  writes: number;
  modelCalls: number;
  /** Open operations a read is waiting for (a read given a consistency token): taken first. */
  awaited: number;
}

/** What a flush covered. */
export interface FlushResult {
  flushed: number;
  succeeded: number;
  failed: number;
  failedEventIds: Id[];
}

export type EventStatus = 'pending' | 'running' | 'succeeded' | 'failed';

/** One operation of the tenant's log (EventsService). */
export interface MemoryEvent {
  eventId: Id;
  status: EventStatus | 'unspecified';
  kind: string;
  acceptedAt: Date;
  finishedAt: Date | null;
  createdMemoryIds: Id[];
  duplicateOfMemoryIds: Id[];
  mergedIntoMemoryIds: Id[];
  nearDuplicateOf: Id[];
  errorReason: string;
  errorMessage: string;
  attempts: number;
  latencyMs: number;
  /** In watchEvents: pass the last one as `afterSequence` to resume exactly there; '0' otherwise. */
  sequence: Id;
  extracted: boolean;
}

export interface EventPage {
  events: MemoryEvent[];
  /** '' on the last page. */
  nextPageToken: string;
}

export type WorkspaceChange =
  | { op: 'put'; key: string; content: string }
  | { op: 'delete'; key: string; content?: string };

export interface WriteOptions {
  /** The generation this write was decided on; omitted, the server refuses with OBSERVATION_MISSING. */
  observedGeneration?: bigint | number | null;
  requestId?: string;
}

export declare class MemoryClient {
  constructor(target: string, options?: ClientOptions);
  /** The member list calls are routed by (null without `members`); a NOT_OWNER refusal updates it. */
  members: Map<string, string> | null;
  close(): void;
  /** The consistency token of this client's latest write of `tenant`; null when none is kept. */
  consistencyToken(tenant: string): string | null;
  /**
   * `fast`: the hot path when enabled for the tenant. `requestId: ''` sends none (never repeated).
   * `occurredAt` (a Date or unix seconds), `thread` and `speaker`: when it was said, its place in a conversation, who said it.
   * `expiresAt`: when it expires (unset: the tenant's default time to live; docs/expiry.md).
   */
  retain(tenant: string, text: string, options?: RetainOptions): Promise<RetainResult>;
  /**
   * A multi-turn conversation as one memory whose text is the transcript ("role: content" lines);
   * the same conversation again is a duplicate. The options are the whole conversation's.
   */
  retainConversation(
    tenant: string,
    messages: Array<ConversationMessage | [role: string, content: string]>,
    options?: RetainOptions,
  ): Promise<RetainResult>;
  recall(
    tenant: string,
    query: string,
    options?: {
      /** 1 to the server's --max-k; 0 or none: the server's default (5, or its --max-k when lower). */
      k?: number;
      scopes?: string[];
      metadataEquals?: Record<string, string>;
      consistencyToken?: ConsistencyToken;
    },
  ): Promise<RecallHit[]>;
  /** AdminService.Stats, as the proto-loader object (snake_case fields). */
  stats(tenant: string): Promise<Record<string, unknown>>;
  /** Flush waits for the fast writes accepted before it (with `consistencyToken`: that token's only); Disable for the queue to drain. */
  hotPath(tenant: string, action: 'flush', options?: { timeoutSeconds?: number; consistencyToken?: string }): Promise<FlushResult>;
  hotPath(tenant: string, action: 'enable' | 'disable' | 'status', options?: { timeoutSeconds?: number }): Promise<HotPathStatus>;
  hotPath(tenant: string, action: HotPathAction, options?: { timeoutSeconds?: number }): Promise<HotPathStatus | FlushResult>;
  getEvent(tenant: string, eventId: Id | number | bigint): Promise<MemoryEvent>;
  listEvents(
    tenant: string,
    /** `pageSize` 0 or none: the server's default (100, or its --max-page-size when lower). */
    options?: { status?: EventStatus; acceptedAfter?: Date | number; pageSize?: number; pageToken?: string },
  ): Promise<EventPage>;
  /**
   * Status transitions, replayed then live; leaving the `for await` loop cancels the stream. Cut by
   * a restart of the server, it is opened again from the last event given, within the retry window.
   */
  watchEvents(
    tenant: string,
    options?: { afterEventId?: Id | number | bigint; afterSequence?: Id | number | bigint; timeoutMs?: number },
  ): AsyncGenerator<MemoryEvent, void, undefined>;
  assembleContext(
    tenant: string,
    workspace: string,
    options?: { query?: string; k?: number; consistencyToken?: ConsistencyToken },
  ): Promise<AssembledContext>;
  getRecord(tenant: string, scope: string, key: string): Promise<{ record: WorkspaceRecord; generation: bigint }>;
  /** Resolves the new Global generation. */
  updateGlobal(tenant: string, content: string, options?: WriteOptions): Promise<bigint>;
  updateWorkspace(
    tenant: string,
    workspace: string,
    changes: WorkspaceChange[],
    options?: WriteOptions,
  ): Promise<{ applied: number; generation: bigint }>;

  // -- every other RPC (a method for each: tests/test_docs.py) ---------------------------------
  /** One result per item, in order; an item is a text or a RetainItem. */
  retainBatch(tenant: string, items: Array<string | RetainItem>, options?: { requestId?: string; fast?: boolean }): Promise<RetainResult[]>;
  getMemory(tenant: string, memoryId: Id | number | bigint, options?: { consistencyToken?: ConsistencyToken }): Promise<Memory>;
  listMemories(
    tenant: string,
    options?: {
      scope?: string;
      /** 0 or none: the server's default (100, or its --max-page-size when lower). */
      pageSize?: number;
      pageToken?: string;
      includeForgotten?: boolean;
      newestFirst?: boolean;
      thread?: string;
      metadataEquals?: Record<string, string>;
      consistencyToken?: ConsistencyToken;
    },
  ): Promise<{ memories: Memory[]; nextPageToken: string }>;
  /** False if it was forgotten already. */
  forget(tenant: string, memoryId: Id | number | bigint, options?: { requestId?: string }): Promise<boolean>;
  /** `metadata` replaces the memory's whole metadata (`{}` clears it); without it the metadata is kept. */
  updateMemory(
    tenant: string,
    memoryId: Id | number | bigint,
    options?: {
      text?: string;
      metadata?: Record<string, string>;
      replaceMetadata?: boolean;
      requestId?: string;
      /** A new expiry; unset (or null) keeps the current one, or the tenant's policy extends it. */
      expiresAt?: ExpiresAt | null;
      /** The memory never expires from now on (with `expiresAt` too: EXPIRES_AT_CONFLICT). */
      clearExpiresAt?: boolean;
    },
  ): Promise<{ memory: Memory; updated: boolean; nearDuplicateOf: Id[]; supersedes: Id[] }>;
  /** How many were forgotten. */
  forgetMemories(tenant: string, metadataEquals: Record<string, string>, options?: { scope?: string; requestId?: string }): Promise<number>;
  listMemoryVersions(tenant: string, memoryId: Id | number | bigint): Promise<MemoryVersion[]>;
  verifyIntegrity(tenant: string): Promise<IntegrityReport>;
  ping(): Promise<void>;
  whoAmI(): Promise<{ name: string; tenants: string[]; admin: boolean }>;
  dedup(
    tenant: string,
    options?: { merge?: boolean; threshold?: number; requestId?: string },
  ): Promise<{ groups: Array<{ keepMemoryId: Id; duplicateMemoryIds: Id[] }>; merged: boolean; threshold: number }>;
  /** One step of a tenant's move to another embedder (admin token): call again until `finished`. */
  reembedTenant(
    tenant: string,
    embedder: 'minilm' | 'hashing',
    options?: { chunkSize?: number },
  ): Promise<{ embedder: string; done: number; total: number; finished: boolean; switched: number }>;
  listTenants(options?: { pageSize?: number; pageToken?: string }): Promise<TenantPage>;
  /** NOT one snapshot: each tenant read in a transaction of its own. */
  aggregateStats(options?: { chunkSize?: number; timeoutMs?: number }): Promise<AggregateStats>;
  listScopes(tenant: string): Promise<Array<{ scope: string; generation: bigint; records: number }>>;
  eraseTenant(tenant: string): Promise<{ tenant: string; erasedAt: Date | null; tokenName: string; headHash: string }>;
  /** The backup stream's parts, as the proto-loader objects (snake_case fields). */
  backup(options?: { tenants?: string[]; known?: Array<Record<string, unknown>>; timeoutMs?: number }): AsyncGenerator<Record<string, unknown>, void, undefined>;
  /** {manifest} first, then {chunk}s, as the proto-loader objects. */
  exportTenant(tenant: string, options?: { timeoutMs?: number }): AsyncGenerator<Record<string, unknown>, void, undefined>;
  importTenant(
    manifest: Record<string, unknown>,
    chunks: Iterable<Record<string, unknown>> | AsyncIterable<Record<string, unknown>>,
    options?: { tenant?: string; replace?: boolean; timeoutMs?: number },
  ): Promise<{ tenant: string; headHash: string; ledgerEntries: number; memories: number; replaced: boolean }>;
  moveTenant(tenant: string, destination: string, options?: { member?: string; timeoutMs?: number }): Promise<MoveResult>;
  /** Whether it was activated now (false: it was already). */
  activateTenant(tenant: string, epoch: number | bigint | string, headHash: string, options?: { member?: string }): Promise<boolean>;
  changeMembers(to: string, options?: { complete?: boolean }): Promise<{ member: string; creationsWaited: number; previousDone: boolean }>;
  listRecords(tenant: string, scope: string): Promise<{ records: WorkspaceRecord[]; generation: bigint }>;
  /** Resolves the new generation. */
  editRecords(
    tenant: string,
    scope: string,
    changes: WorkspaceChange[],
    expectedGeneration: bigint | number,
    options?: { requestId?: string },
  ): Promise<bigint>;
  consolidate(
    tenant: string,
    scope: string,
    changes: WorkspaceChange[],
    expectedGeneration: bigint | number,
    receiptId: string,
  ): Promise<{ generation: bigint; alreadyApplied: boolean }>;
  consolidateSession(tenant: string, options?: { thread?: string }): Promise<SessionOutcome[]>;
  listMemoryRevisions(tenant: string, memoryId: bigint | number): Promise<MemoryRevision[]>;
  tenantFigures(tenant: string): Promise<{
    countingSince: Date | null;
    minutes: Array<{
      start: Date | null; writes: number; recalls: number; failedEvents: number;
      hotPathDepth: number | null; oldestPendingSeconds: number | null; fileBytes: number | null;
    }>;
    memories: Array<{ at: Date | null; memories: number }>;
    fileBytes: number;
    hotPathDepth: number;
    oldestPendingSeconds: number;
  }>;
  listTenantFigures(options?: { limit?: number }): Promise<{
    tenants: number;
    countingSince: Date | null;
    largest: TenantFiguresRow[];
    busiest: TenantFiguresRow[];
    failing: TenantFiguresRow[];
    unansweredMembers: string[];
  }>;
  revertMemory(
    tenant: string,
    memoryId: bigint | number,
    revision: number,
    options?: { requestId?: string | null },
  ): Promise<{ memory: Memory; revision: number }>;
  getExpiryPolicy(tenant: string): Promise<ExpiryPolicy>;
  setExpiryPolicy(tenant: string, policy?: Partial<ExpiryPolicy>): Promise<ExpiryPolicy>;
  listRecordRevisions(tenant: string, scope: string, key: string): Promise<{ revisions: RecordRevision[]; generation: bigint }>;
  revertRecord(
    tenant: string,
    scope: string,
    key: string,
    generation: bigint | number,
    expectedGeneration: bigint | number,
    options?: { requestId?: string | null },
  ): Promise<bigint>;
  createWebhook(
    tenant: string,
    url: string,
    kinds: WebhookKind[],
    options?: { includeText?: boolean; secrets?: string[] },
  ): Promise<{ webhook: Webhook; secrets: string[] }>;
  listWebhooks(tenant: string): Promise<Webhook[]>;
  deleteWebhook(tenant: string, webhookId: bigint | number): Promise<boolean>;
  rotateWebhookSecret(
    tenant: string,
    webhookId: bigint | number,
    options?: { secret?: string; retireSecretIds?: Array<bigint | number> },
  ): Promise<{ webhook: Webhook; secrets: string[] }>;
  resumeWebhook(tenant: string, webhookId: bigint | number): Promise<Webhook>;
  listWebhookDeliveries(
    tenant: string,
    webhookId: bigint | number,
    options?: { pageSize?: number; pageToken?: string },
  ): Promise<{ deliveries: WebhookDelivery[]; nextPageToken: string }>;
}

export type WebhookKind =
  | 'memory.created' | 'memory.updated' | 'memory.forgotten' | 'memory.expired' | 'record.changed'
  | 'fast_write.succeeded' | 'fast_write.failed' | 'consolidation.applied';
export const WEBHOOK_KINDS: WebhookKind[];

export interface Webhook {
  id: bigint;
  url: string;
  kinds: WebhookKind[];
  includeText: boolean;
  secrets: Array<{ id: bigint; hint: string; createdAt: Date | null }>;
  createdAt: Date | null;
  pendingDeliveries: number;
  failingSince: Date | null;
  pausedAt: Date | null;
  pauseReason: string;
}

export interface WebhookDelivery {
  deliveryId: string;
  kind: WebhookKind;
  at: Date | null;
  delivered: boolean;
  attempts: number;
  nextAttemptAt: Date | null;
  lastAttemptAt: Date | null;
  lastStatusCode: number;
  lastError: string;
  deliveredAt: Date | null;
  memoryId: bigint;
  eventId: bigint;
}

/** The options of `retain` and `retainConversation`. */
export interface RetainOptions {
  scope?: string;
  metadata?: Record<string, string>;
  requestId?: string;
  fast?: boolean;
  occurredAt?: Date | number | null;
  thread?: ThreadRef | null;
  speaker?: string;
  expiresAt?: ExpiresAt | null;
}

/** One turn of a conversation for `retainConversation`; `name` is who spoke, beside the role. */
export interface ConversationMessage {
  role: string;
  content: string;
  name?: string;
}

export interface RetainItem {
  text: string;
  scope?: string;
  metadata?: Record<string, string>;
  occurredAt?: Date | number | null;
  thread?: ThreadRef | null;
  speaker?: string;
  expiresAt?: ExpiresAt | null;
}

export interface MemoryVersion {
  version: number;
  text: string;
  metadata: Record<string, string>;
  at: Date | null;
  current: boolean;
}

export interface IntegrityReport {
  valid: boolean;
  firstBrokenAt: number;
  checked: number;
  headHash: string;
  problems: Array<{ ledgerSeq: number; memoryId: Id; kind: string; detail: string }>;
}

export interface TenantPage {
  tenants: string[];
  nextPageToken: string;
  damaged: string[];
  unansweredMembers: string[];
}

export interface AggregateStats {
  /** tenant -> AdminService.Stats as the proto-loader object. */
  tenants: Record<string, Record<string, unknown>>;
  /** tenant -> the reason its file could not be read. */
  damaged: Record<string, string>;
  total: Record<string, unknown> | null;
  filesRead: number;
  consistency: string;
  unansweredMembers: string[];
}

export interface MoveResult {
  tenant: string;
  source: string;
  destination: string;
  epoch: number;
  headHash: string;
  bytes: number;
  steps: string[];
  memories: number;
}

export interface SessionOutcome {
  thread: string;
  scope: string;
  receiptId: string;
  outcome: string;
  generation: bigint;
  modelCalls: number;
  conflicts: number;
}

/** A failed call: the gRPC status plus the ErrorInfo reason. Branch on `reason`, never on text. */
export declare class MnemosyneError extends Error {
  constructor(code: number, reason: string, message: string, metadata?: Record<string, string>, domain?: string);
  /** 'MnemosyneError', or the name of the subclass of its reason (TimelineChangedError ...). */
  readonly name: string;
  /** gRPC status code (grpc.status.*). */
  code: number;
  codeName: string;
  /** ErrorInfo reason, e.g. GENERATION_MISMATCH ('' when the server sent none). */
  reason: string;
  /** The server's message for people. */
  details: string;
  metadata: Record<string, string>;
  domain: string;
  /** The google.rpc.RetryInfo retry_delay in milliseconds, null when the server sent none. */
  retryDelayMs: number | null;
}

/**
 * INVALID_ARGUMENT: arguments that make no request, refused before anything is sent, with the
 * reason the server gives the same fault: REQUEST_UNDECODABLE (a text holding a lone surrogate),
 * NUMBER_INVALID (an integer field given 1.5, NaN, 1e300 or a value past its range),
 * OCCURRED_AT_INVALID / EXPIRES_AT_INVALID / TIMESTAMP_INVALID (no valid Date, or outside the years
 * 1 to 9999), TIMEOUT_INVALID (a deadline not more than 0 and at most a year), MEMBER_ID_INVALID,
 * HOT_PATH_ACTION_INVALID, EVENT_STATUS_INVALID, WEBHOOK_KINDS_INVALID; the constructor's, for a token
 * that is not printable ASCII, TOKEN_MALFORMED.
 */
export declare class RequestInvalidError extends MnemosyneError {
  constructor(reason: string, message: string);
}

/**
 * The consistency-token refusals, each a MnemosyneError (docs/polyglot.md). After the first three
 * the client has dropped its token for the tenant (its writes are gone: read again, write again
 * what you still need); after ConsistencyDeadlineExceededError it keeps it (the writes are still
 * queued; `metadata.open_event_ids` names them).
 */
/** INVALID_ARGUMENT TOKEN_INVALID: a token this tenant's server did not issue. */
export declare class TokenInvalidError extends MnemosyneError {}
/** INVALID_ARGUMENT TOKEN_FOREIGN: another tenant's token. */
export declare class TokenForeignError extends MnemosyneError {}
/** FAILED_PRECONDITION TIMELINE_CHANGED: the tenant was restored or replaced since the token. */
export declare class TimelineChangedError extends MnemosyneError {}
/** DEADLINE_EXCEEDED CONSISTENCY_DEADLINE_EXCEEDED: the token's writes were still open at the deadline. */
export declare class ConsistencyDeadlineExceededError extends MnemosyneError {}

/**
 * A grpc-js ServiceError (or any other error) as a MnemosyneError when it carries a status.
 * `target`: the address the call went to, named in the message of a failure that did not come
 * from a Mnemosyne server ("is a Mnemosyne server listening at HOST:PORT?").
 */
export declare function fromServiceError(err: unknown, target?: string): MnemosyneError | unknown;

/** The memory part of an agent's prompt from an assembly; names no generation. */
export declare function renderContext(assembled: AssembledContext, workspace: string): string;

export type ToolResult = { ok: true; result: string } | { ok: false; error: string; reason: string };

export declare class MemoryHost {
  /** `observations` may be shared between hosts of one process that serve the same agents. */
  constructor(client: MemoryClient, tenant: string, options?: { observations?: WeakMap<object, object> });
  readonly client: MemoryClient;
  readonly tenant: string;
  readonly observations: WeakMap<object, object>;
  /**
   * The agent's memory context; records the generations it was read at, for that agent object.
   * It waits for the client's own writes of the tenant still queued (`consistencyToken`: as for recall).
   */
  assembleContext(
    agent: object,
    workspace: string,
    options?: { query?: string; k?: number; consistencyToken?: ConsistencyToken },
  ): Promise<string>;
  /** Function-calling schemas for `memory_update` and `update_workspace`. */
  static toolSchemas(format?: 'openai' | 'anthropic'): object[];
  /** Runs one model tool call; resolves an error result (never rejects) for what the model sent. */
  callTool(agent: object, name: string, args: string | Record<string, unknown>): Promise<ToolResult>;
}

/** The member owning `tenant` among the member ids (rendezvous hashing, docs/scale-out.md). */
export declare function ownerOf(tenant: string, members: Iterable<string>): string;

export interface MemoryRevision {
  revision: number;
  kind: 'retained' | 'updated' | 'reverted' | 'superseded' | 'merged';
  at: Date | null;
  surface: string;
  tokenName: string;
  changed: string[];
  version: number;
  text: string;
  metadata: Record<string, string>;
  expiresAt: Date | null;
  ledgerSeq: bigint;
  relatedMemoryId: bigint;
  revertedTo: number;
}

export interface RecordRevision {
  generation: bigint;
  op: string;
  content: string;
  at: Date | null;
  surface: string;
  tokenName: string;
  source: string;
  ledgerSeq: bigint;
}

export interface ExpiryPolicy {
  defaultTtlSeconds: number;
  updateExtends: boolean;
  graceSeconds: number;
}

export interface TenantFiguresRow {
  tenant: string;
  fileBytes: number;
  writes: number;
  recalls: number;
  failedEvents: number;
}
