import { InvocationId, objectPartitionKey, scheduleId, scopePartitionKey } from '../common/ids.js';
import type { UserLimitRow } from '../partition/flow-control.js';
import { ManageAction as Action, type CommandKind, type Schedule } from '../log/commands.js';
import type { ScheduleRecord } from '../storage/tables/schedules.js';
import type { InvocationStatus } from '../partition/state.js';
import type { Worker } from '../partition/worker.js';
import { decode, pb } from '../protocol/messages.js';
import { objectKeyOf, splitObjectKey } from '../storage/keys.js';
import { KeelError } from '../errors/index.js';
import { splitPromiseKey } from '../storage/tables/promises.js';
import type { SubscriptionStatus } from '../subscriptions/manager.js';
import { unknownInvocation, type FlowEntry, type FlowQueueRow, type IntrospectionSource, type InvocationChanges, type LockRow, type ManageAction, type ManageAnswer, type PartitionInfo, type RawJournalEntry, type StateEntryRow, type StepAttempts, type Wait } from './introspection.js';
import { nextAttempt } from '../storage/tables/invocations.js';

/** The admin API's view of the partitions, through the worker's read interface. */
export class WorkerIntrospection implements IntrospectionSource {
  constructor(
    private readonly worker: Worker,
    private readonly subscriptionSource?: { status(id?: string): Promise<SubscriptionStatus[]> },
  ) {}

  subscriptions(id?: string): Promise<SubscriptionStatus[]> {
    return this.subscriptionSource?.status(id) ?? Promise.resolve([]);
  }

  invocationLines(): AsyncIterable<Uint8Array> {
    return this.worker.scanInvocationLines();
  }

  watchInvocations(listener: (changes: InvocationChanges) => void): () => void {
    return this.worker.watchInvocations(listener);
  }

  async journalEntries(id: string): Promise<RawJournalEntry[]> {
    const parsed = InvocationId.parse(id);
    return parsed === undefined ? [] : this.worker.readJournal(parsed);
  }

  async stepAttempts(id: string): Promise<StepAttempts | undefined> {
    const parsed = InvocationId.parse(id);
    const s = parsed === undefined ? undefined : this.worker.viewOf(parsed.partitionKey).peekStatus(id);
    if (s === undefined) return undefined;
    // The step under way: its failed attempts, and the one running now.
    const current = s.status === 'completed' ? 0 : (s.retries_since_command ?? s.retry_count) + (s.status === 'running' ? 1 : 0);
    return { ...(s.step_attempts ? { done: s.step_attempts } : {}), current };
  }

  async unfinishedPinnedTo(deploymentId: string): Promise<number> {
    let pinned = 0;
    for await (const s of this.worker.unfinishedInvocations()) if (s.deployment_id === deploymentId) pinned++;
    return pinned;
  }

  async replayCandidates(services: ReadonlySet<string>, deploymentId: string, limit: number): Promise<{ sample: InvocationStatus[]; suspended: number; other: Record<string, number> }> {
    const sample: InvocationStatus[] = [];
    const other: Record<string, number> = {};
    let suspended = 0;
    for await (const s of this.worker.unfinishedInvocations()) {
      if (!services.has(s.service) || s.deployment_id !== deploymentId) continue;
      if (s.status !== 'suspended') other[s.status] = (other[s.status] ?? 0) + 1;
      else if (++suspended <= limit) sample.push({ ...s });
    }
    return { sample, suspended, other };
  }

  async *state(): AsyncIterable<StateEntryRow> {
    // From the store: memory holds only the most recently used objects.
    for await (const [objectKey, k, value, expires_at_ms] of this.worker.storedState()) {
      yield { ...splitObjectKey(objectKey), state_key: Buffer.from(k, 'base64url').toString('utf8'), value, ...(expires_at_ms !== undefined ? { expires_at_ms } : {}) };
    }
  }

  async *inbox(): AsyncIterable<{ service: string; key: string; id: string; seq: number; created_at_ms: number; scope?: string }> {
    for (const p of this.worker.views()) {
      for (const [objectKey, queue] of p.state.inboxes) {
        const object = splitObjectKey(objectKey);
        for (const e of queue) {
          yield { ...object, id: e.id, seq: e.seq, created_at_ms: p.state.status(e.id)?.created_at_ms ?? 0 };
        }
      }
    }
  }

  /** Queues with waiters or paused (memory), and every queue used (table vqm), with their meta. */
  async *flowQueues(): AsyncIterable<FlowQueueRow> {
    for (const p of this.worker.views()) {
      const seen = new Set<string>();
      for (const q of p.state.flow.queueRows()) {
        const at = (id: string | undefined) => (id === undefined ? undefined : p.state.peekStatus(id)?.inboxed_at_ms);
        seen.add(`${q.scope}:${q.limit_key}`);
        const meta = p.state.queueMeta(q.scope, q.limit_key);
        yield { ...q, created_at_ms: at(q.head), last_enqueued_at_ms: at(q.tail), ...(meta ? { meta } : {}) };
      }
      for await (const [scope, limit_key] of this.worker.storedQueueMetas(p.partition)) {
        if (seen.has(`${scope}:${limit_key}`)) continue;
        // As the partition has it now (the store may not have its latest batch yet).
        const meta = p.state.queueMeta(scope, limit_key);
        yield { scope, limit_key, paused: false, waiting: 0, running: p.state.flow.queueUsage(scope, limit_key), ...(meta ? { meta } : {}) };
      }
    }
  }

  pauseFlowQueue(scope: string, limitKey: string, paused: boolean): Promise<void> {
    return this.worker.partitionOf(scopePartitionKey(scope)).append({ kind: 'flow_queue', flow_queue: { scope, limit_key: limitKey, paused } });
  }

  async *schedules(): AsyncIterable<ScheduleRecord> {
    for await (const s of this.worker.storedSchedules()) if (s.deleted !== true) yield s;
  }

  async schedule(name: string): Promise<ScheduleRecord | undefined> {
    const id = scheduleId(name);
    const s = this.worker.viewOf(id.partitionKey).schedule(id.text);
    return s?.deleted === true ? undefined : s;
  }

  applySchedule(command: Schedule): Promise<void> {
    return this.worker.append(scheduleId(command.name ?? ''), { kind: 'schedule', schedule: command });
  }

  async *userLimits(): AsyncIterable<UserLimitRow & { partition_key: bigint }> {
    for (const p of this.worker.views()) {
      for (const r of p.state.flow.userLimits()) yield { ...r, partition_key: scopePartitionKey(r.scope) };
    }
  }

  async *locks(): AsyncIterable<LockRow> {
    for await (const [objectKey, holder] of this.worker.storedLocks()) yield { ...splitObjectKey(objectKey), ...holder };
  }

  async *flowEntries(): AsyncIterable<FlowEntry> {
    for (const p of this.worker.views()) {
      for (const [scope, byKey] of p.state.flow.queues) {
        for (const [limitKey, q] of byKey) {
          for (const e of q) {
            const s = p.state.peekStatus(e.id);
            yield {
              scope, limit_key: limitKey, id: e.id, seq: e.seq, created_at_ms: s?.created_at_ms, inboxed_at_ms: s?.inboxed_at_ms,
              started_before: s?.last_start_at_ms !== undefined, last_start_at_ms: s?.last_start_at_ms, deployment_id: s?.deployment_id,
              runnable_at_ms: s?.runnable_at_ms ?? s?.execute_at_ms ?? s?.created_at_ms, retry_count: s?.retry_count, retries_since_command: s?.retries_since_command,
              starts: s?.starts ?? 0,
              ...(s === undefined ? { next_attempt: 0 } : waitOf(s)),
            };
          }
        }
      }
    }
  }

  async *flowScheduler(): AsyncIterable<{ scope: string; limit_key: string; waiting: number; head: string; blocked_on: string; blocked: Record<string, unknown>; ready_at_ms?: number; head_wait?: Wait }> {
    for (const p of this.worker.views()) {
      for (const row of p.state.flow.schedulerRows()) {
        const s = p.state.peekStatus(row.head);
        yield s === undefined ? row : { ...row, head_wait: waitOf(s) };
      }
    }
  }

  async *promises(): AsyncIterable<{ service: string; key: string; name: string; scope?: string; completed: boolean; value?: Buffer; failure?: { code: number; message: string } }> {
    for await (const [k, promise] of this.worker.storedPromises()) {
      const { service, key, name, scope } = splitPromiseKey(k);
      const completed = promise.value !== undefined || promise.failure !== undefined;
      yield {
        service,
        key,
        name,
        ...(scope !== undefined ? { scope } : {}),
        completed,
        ...(promise.value !== undefined ? { value: Buffer.from(promise.value, 'base64') } : {}),
        ...(promise.failure ? { failure: promise.failure } : {}),
      };
    }
  }

  /** Replaces the state of one key, unless an invocation holds it (the fold checks again, and the version). */
  async setState(service: string, key: string, entries: Map<string, Buffer>, version?: string): Promise<void> {
    const p = this.worker.partitionOf(objectPartitionKey(service, key));
    const holder = p.state.lockOf(objectKeyOf(service, key));
    if (holder !== undefined) {
      throw new KeelError(
        'KEEL0008',
        `the invocation '${holder}' holds '${service}/${key}': its state can be changed once no invocation runs for the key (wait for it, or cancel or kill it)`,
      );
    }
    const list = [...entries].map(([k, value]) => ({ key: Buffer.from(k, 'utf8'), value }));
    await p.append({ kind: 'modify_state', modify_state: { service, key, entries: list, ...(version !== undefined ? { version } : {}) } });
  }

  async partitions(): Promise<PartitionInfo[]> {
    const inMemory = this.worker.timersInMemory();
    return this.worker.processors.map((p) => {
      const invocations: Record<string, number> = { ...p.state.counters.statuses };
      let inboxed = 0;
      for (const q of p.state.inboxes.values()) inboxed += q.length;
      return { partition: p.partition, ...p.info(), invocations, timers: p.state.counters.timers, timers_in_memory: inMemory[p.partition] ?? 0, outbox: p.state.counters.outbox, inboxed, limit_rules_version: p.state.flow.rules.book.version };
    });
  }

  async manage(idText: string, action: ManageAction): Promise<ManageAnswer> {
    const id = InvocationId.parse(idText);
    const s = id === undefined ? undefined : this.worker.invocation(id);
    if (id === undefined || s === undefined) throw unknownInvocation(idText);
    const done = s.status === 'completed';
    const refuse = (state: string) => new KeelError('KEEL0008', `The invocation '${idText}' ${state}.`);
    const append = (kind: CommandKind) => this.worker.append(id, kind);
    switch (action) {
      case 'cancel':
      case 'kill':
        if (done) throw refuse('was already completed');
        await append({ kind: 'manage', manage: { invocation_id: id.bytes, action: action === 'kill' ? Action.KILL : Action.CANCEL } });
        return { status: action === 'kill' ? 200 : 202 };
      case 'pause':
        if (s.status === 'paused') return { status: 200 };
        if (!['running', 'backing-off', 'suspended'].includes(s.status)) throw refuse(`is ${s.status}: only running invocations can be paused`);
        await append({ kind: 'manage', manage: { invocation_id: id.bytes, action: Action.PAUSE } });
        return { status: 202 };
      case 'resume':
        if (done) throw refuse('was already completed');
        if (s.status === 'inboxed' || s.status === 'scheduled') throw new KeelError('KEEL0017', `The invocation '${idText}' has not started yet.`);
        await append({ kind: 'manage', manage: { invocation_id: id.bytes, action: Action.RESUME } });
        return { status: 200 };
      case 'purge':
        if (!done) throw refuse('is not completed');
        await append({ kind: 'purge', purge: { invocation_id: id.bytes } });
        return { status: 200 };
      case 'restart-as-new':
        if (!done) throw refuse('is still running');
        return this.restartAsNew(id, s);
    }
  }

  /** A completed invocation runs again from its input, under a new id. */
  private async restartAsNew(id: InvocationId, s: InvocationStatus): Promise<ManageAnswer> {
    if (s.service_type === 'Workflow' && s.handler_type === 'Workflow') throw new KeelError('KEEL0018', `The invocation '${id.text}' is the run of workflow ${s.service}/${s.key}: workflow runs cannot be restarted as new.`);
    const first = await this.worker.readJournalEntry(id, 0);
    if (first === undefined || s.journal_length === 0) throw new KeelError('KEEL0019', `The input of '${id.text}' is gone (its journal retention ended).`);
    const input = decode(pb.Input, first.payload);
    // A scoped invocation restarts in its scope, on its scope's partition, under its limits.
    const pk = s.scope !== undefined ? scopePartitionKey(s.scope) : s.service_type === 'Service' ? this.worker.localPartitionKey() : objectPartitionKey(s.service, s.key);
    const fresh = InvocationId.random(pk);
    await this.worker.append(fresh, {
      kind: 'invoke',
      invoke: {
        invocation_id: fresh.bytes,
        service: s.service,
        handler: s.handler,
        key: s.key,
        input: input.value?.content ?? Buffer.alloc(0),
        headers: (input.headers ?? []).map((h) => ({ key: h.key ?? '', value: h.value ?? '' })),
        service_type: s.service_type,
        handler_type: s.handler_type,
        completion_retention_ms: s.completion_retention_ms,
        journal_retention_ms: s.journal_retention_ms,
        restarted_from: s.id,
        ...(s.scope !== undefined ? { scope: s.scope } : {}),
        ...(s.limit_key !== undefined ? { limit_key: s.limit_key } : {}),
        ...(s.priority !== undefined ? { priority: s.priority } : {}),
      },
    });
    return { status: 200, body: { new_invocation_id: fresh.text } };
  }
}

/** A waiting invocation's wait, as sys_vqueue_entry_status and sys_scheduler show it. */
function waitOf(s: InvocationStatus): Wait {
  return { since_ms: s.wait_since_ms, waits_on: s.waits_on, blocked_ms: s.blocked_ms, next_attempt: nextAttempt(s) };
}
