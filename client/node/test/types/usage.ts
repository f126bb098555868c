// Compiled (never run) by test/types.test.js with `tsc --strict`: a TypeScript host's use of the
// package type-checks against src/index.d.ts.
import {
  GLOBAL_GENERATION_KEY, MemoryClient, MemoryHost, MnemosyneError, TimelineChangedError, newRequestId, renderContext,
  type AssembledContext, type EventPage, type FlushResult, type HotPathStatus, type Id, type MemoryEvent, type RecallHit,
  type RetainResult, type ToolResult,
} from '../../src/index.js';

export async function host(target: string): Promise<string> {
  const client = new MemoryClient(target, { token: 't', timeoutMs: 5000, retries: 2, retryWindowMs: 10000, maxRetryDelayMs: 1000 });
  const retained: RetainResult = await client.retain('acme', 'Order ORD-1 shipped', { scope: 'orders', requestId: newRequestId() });
  const status: 'created' | 'duplicate' | 'enqueued' | 'invalid' | 'unspecified' = retained.status;
  const hits: RecallHit[] = await client.recall('acme', 'order', { k: 3, metadataEquals: { team: 'ops' } });
  const texts: string[] = hits.map((h) => h.memory.text + h.memory.facts.map((f) => f.normalized).join());
  const said: RetainResult = await client.retain('acme', 'I moved yesterday', {
    occurredAt: new Date(0), thread: { id: 'session-1', position: 2 }, speaker: 'Caroline',
  });
  const when: Date | null = hits[0].memory.occurredAt;
  const talked: RetainResult = await client.retainConversation('acme', [
    { role: 'user', content: 'I moved to Lisbon', name: 'Caroline' }, ['assistant', 'Welcome to Lisbon'],
  ], { scope: 'chats', occurredAt: new Date(0), expiresAt: 2_000_000_000 });
  const expiring: RetainResult = await client.retain('acme', 'The door code is 4711', { expiresAt: new Date(0) });
  await client.retainBatch('acme', [{ text: 'Lunch at noon', expiresAt: 2_000_000_000 }]);
  const kept = await client.updateMemory('acme', expiring.memoryId, { clearExpiresAt: true, expiresAt: null });
  const expires: Date | null = kept.memory.expiresAt;
  const who: string = hits[0].memory.speaker + (hits[0].memory.thread?.id ?? '') + said.status + talked.status;
  const enabled: HotPathStatus = await client.hotPath('acme', 'enable');
  const fast: RetainResult = await client.retain('acme', 'queued', { fast: enabled.enabled, requestId: '' });
  const token: string | null = client.consistencyToken('acme');
  const other = new MemoryClient(target, { sessionConsistency: false, sessionTenants: 100 });
  const waited: RecallHit[] = await other.recall('acme', 'queued', { consistencyToken: token ?? '' });
  try {
    await client.recall('acme', 'queued', { consistencyToken: undefined });
  } catch (err) {
    if (err instanceof TimelineChangedError) return `${err.name}: read again (${waited.length})`;
  }
  const flushed: FlushResult = await client.hotPath('acme', 'flush', { timeoutSeconds: 10 });
  const depth: number = (await client.hotPath('acme', 'status')).queueDepth + flushed.failedEventIds.length;
  const one: MemoryEvent = await client.getEvent('acme', fast.eventId);
  const finished: Date | null = one.finishedAt;
  const page: EventPage = await client.listEvents('acme', { status: 'succeeded', acceptedAfter: new Date(0), pageSize: 10 });
  const created: Id[] = page.events.flatMap((e) => e.createdMemoryIds);
  let lastSequence: Id = '0';
  for await (const e of client.watchEvents('acme', { afterEventId: 0n, afterSequence: lastSequence, timeoutMs: 1000 })) {
    lastSequence = e.sequence;
    if (e.status === 'succeeded') break;
  }
  const assembled: AssembledContext = await client.assembleContext('acme', 'ws', { query: 'plan' });
  const next: bigint = await client.updateGlobal('acme', '# MEMORY', { observedGeneration: assembled.globalGeneration });
  const { applied, generation } = await client.updateWorkspace('acme', 'ws', [
    { op: 'put', key: 'plan.md', content: 'ship it' },
    { op: 'delete', key: 'old.md' },
  ], { observedGeneration: assembled.workspaceGeneration });
  const memoryHost = new MemoryHost(client, 'acme');
  const agent = {};
  const prompt: string = await memoryHost.assembleContext(agent, 'ws', { consistencyToken: '' });
  const result: ToolResult = await memoryHost.callTool(agent, 'memory_update', '{"content": "x"}');
  const summary = result.ok ? result.result : `${result.reason}: ${result.error}`;
  try {
    await client.stats('acme');
  } catch (err) {
    if (err instanceof MnemosyneError && err.reason === 'TENANT_NOT_FOUND') return err.codeName;
    if (err instanceof MnemosyneError && err.retryDelayMs !== null) return `retry after ${err.retryDelayMs} ms`;
  }
  client.close();
  return [status, texts.join(), String(depth), String(finished?.getTime()), String(when?.getTime()), String(expires?.getTime()), who, created.join(), lastSequence, String(next + generation), String(applied), prompt, summary,
    renderContext(assembled, 'ws'), GLOBAL_GENERATION_KEY, JSON.stringify(MemoryHost.toolSchemas('anthropic'))].join('\n');
}
