// The admin API's view of partitions served by threads (worker.threads > 1): a read of one
// invocation, key or schedule goes to the thread serving its partition; a listing asks every
// thread in turn (contiguous ranges, so rows come in partition order, as from one Worker).
import { InvocationId, objectPartitionKey, scheduleId, scopePartitionKey } from '../common/ids.js';
import type { Schedule } from '../log/commands.js';
import type { UserLimitRow } from '../partition/flow-control.js';
import type { InvocationStatus } from '../partition/state.js';
import type { ScheduleRecord } from '../storage/tables/schedules.js';
import type { SubscriptionStatus } from '../subscriptions/manager.js';
import { unknownInvocation, type FlowEntry, type FlowQueueRow, type IntrospectionSource, type InvocationChanges, type LockRow, type ManageAction, type ManageAnswer, type PartitionInfo, type RawJournalEntry, type StateEntryRow, type StepAttempts, type Wait } from '../admin/introspection.js';
import type { PartitionThreads } from './partition-threads.js';

type Candidates = { sample: InvocationStatus[]; suspended: number; other: Record<string, number> };

export class ThreadedIntrospection implements IntrospectionSource {
  constructor(
    private readonly threads: PartitionThreads,
    private readonly subscriptionSource?: { status(id?: string): Promise<SubscriptionStatus[]> },
  ) {}

  subscriptions(id?: string): Promise<SubscriptionStatus[]> {
    return this.subscriptionSource?.status(id) ?? Promise.resolve([]);
  }

  invocationLines(): AsyncIterable<Uint8Array> {
    return this.threads.rows('invocationLines');
  }

  watchInvocations(listener: (changes: InvocationChanges) => void): () => void {
    return this.threads.watch(listener);
  }

  /** Each thread answers after the frames it queued before, its status changes among them (Serving.post). */
  async settled(): Promise<void> {
    await this.threads.callAll('settle', []);
  }

  async journalEntries(id: string): Promise<RawJournalEntry[]> {
    const parsed = InvocationId.parse(id);
    return parsed === undefined ? [] : this.threads.callAt(parsed.partitionKey, 'journalEntries', [id]);
  }

  async stepAttempts(id: string): Promise<StepAttempts | undefined> {
    const parsed = InvocationId.parse(id);
    return parsed === undefined ? undefined : this.threads.callAt(parsed.partitionKey, 'stepAttempts', [id]);
  }

  async unfinishedPinnedTo(deploymentId: string): Promise<number> {
    const counts = await this.threads.callAll<number>('unfinishedPinnedTo', [deploymentId]);
    return counts.reduce((a, b) => a + b, 0);
  }

  async replayCandidates(services: ReadonlySet<string>, deploymentId: string, limit: number): Promise<Candidates> {
    const each = await this.threads.callAll<Candidates>('replayCandidates', [services, deploymentId, limit]);
    const other: Record<string, number> = {};
    for (const c of each) for (const [status, n] of Object.entries(c.other)) other[status] = (other[status] ?? 0) + n;
    return { sample: each.flatMap((c) => c.sample).slice(0, limit), suspended: each.reduce((n, c) => n + c.suspended, 0), other };
  }

  state(): AsyncIterable<StateEntryRow> {
    return this.threads.rows('state');
  }

  inbox(): AsyncIterable<{ service: string; key: string; id: string; seq: number; created_at_ms: number; scope?: string }> {
    return this.threads.rows('inbox');
  }

  flowQueues(): AsyncIterable<FlowQueueRow> {
    return this.threads.rows('flowQueues');
  }

  pauseFlowQueue(scope: string, limitKey: string, paused: boolean): Promise<void> {
    return this.threads.callAt(scopePartitionKey(scope), 'pauseFlowQueue', [scope, limitKey, paused]);
  }

  flowEntries(): AsyncIterable<FlowEntry> {
    return this.threads.rows('flowEntries');
  }

  flowScheduler(): AsyncIterable<{ scope: string; limit_key: string; waiting: number; head: string; blocked_on: string; blocked: Record<string, unknown>; ready_at_ms?: number; head_wait?: Wait }> {
    return this.threads.rows('flowScheduler');
  }

  userLimits(): AsyncIterable<UserLimitRow & { partition_key: bigint }> {
    return this.threads.rows('userLimits');
  }

  locks(): AsyncIterable<LockRow> {
    return this.threads.rows('locks');
  }

  promises(): AsyncIterable<{ service: string; key: string; name: string; scope?: string; completed: boolean; value?: Buffer; failure?: { code: number; message: string } }> {
    return this.threads.rows('promises');
  }

  manage(id: string, action: ManageAction): Promise<ManageAnswer> {
    const parsed = InvocationId.parse(id);
    return parsed === undefined ? Promise.reject(unknownInvocation(id)) : this.threads.callAt(parsed.partitionKey, 'manage', [id, action]);
  }

  setState(service: string, key: string, entries: Map<string, Buffer>, version?: string): Promise<void> {
    return this.threads.callAt(objectPartitionKey(service, key), 'setState', [service, key, entries, version]);
  }

  async partitions(): Promise<PartitionInfo[]> {
    return (await this.threads.callAll<PartitionInfo[]>('partitions', [])).flat();
  }

  schedules(): AsyncIterable<ScheduleRecord> {
    return this.threads.rows('schedules');
  }

  schedule(name: string): Promise<ScheduleRecord | undefined> {
    return this.threads.callAt(scheduleId(name).partitionKey, 'schedule', [name]);
  }

  applySchedule(command: Schedule): Promise<void> {
    return this.threads.callAt(scheduleId(command.name ?? '').partitionKey, 'applySchedule', [command]);
  }
}
