import { assert } from '../../common/assert.js';
import { InvocationId } from '../../common/ids.js';
import { TimerKind, encodeCommand, type CommandKind, type ResultMsg } from '../../log/commands.js';
import { MessageType, decode, encode, isNotification, pb, type Notification } from '../../protocol/messages.js';
import { objectKeyOf, type Action, type BlockedOn, type InvocationResult, type InvocationStatus, type JournalEntry, type PartitionState } from '../state.js';
import { nextAttempt } from '../../storage/tables/invocations.js';

/** What every fold gets: the state to change, the actions to ask for, and the command's time. */
export interface FoldContext {
  state: PartitionState;
  actions: Action[];
  now_ms: number;
}

/** The invocation id every command of a partition carries; a command without one is a bug. */
export function idOf(bytes: Buffer | undefined, what: string): InvocationId {
  const id = bytes === undefined ? undefined : InvocationId.fromBytes(bytes);
  assert(id !== undefined, () => `${what} without a valid invocation id`);
  return id;
}

export function statusOf(ctx: FoldContext, idBytes: Buffer | undefined, what: string): InvocationStatus | undefined {
  return ctx.state.status(idOf(idBytes, what).text);
}

/**
 * The invocation a message of an attempt belongs to, if that attempt is still the current one;
 * the first attempt to report pins the invocation to its deployment and protocol version.
 */
export function liveAttemptOf(
  ctx: FoldContext,
  cmd: { invocation_id?: Buffer; epoch?: number; deployment_id?: string; protocol_version?: number },
  what: string,
): InvocationStatus | undefined {
  const s = statusOf(ctx, cmd.invocation_id, what);
  if (s === undefined || s.status !== 'running' || s.epoch !== (cmd.epoch ?? 0)) return undefined;
  if (s.deployment_id === undefined && cmd.deployment_id) {
    s.deployment_id = cmd.deployment_id;
    s.protocol_version = cmd.protocol_version;
  }
  return s;
}

/**
 * Starts the next attempt of an invocation that is not running. One that held no flow-control
 * slot (suspended, paused) takes one first, or waits in its queue for one.
 */
export function resume(ctx: FoldContext, s: InvocationStatus): void {
  assert(s.status !== 'completed', () => `resume of ${s.id}, which has completed`);
  s.modified_at_ms = ctx.now_ms;
  delete s.waiting;
  delete s.next_retry_at_ms;
  const holdsSlot = s.status === 'running' || s.status === 'backing-off';
  if (!holdsSlot && waitsForSlot(ctx, s)) return;
  run(ctx, s);
}

/** Starts an attempt now: the first, or (for one that ran before) the next. */
function run(ctx: FoldContext, s: InvocationStatus): void {
  if (s.last_start_at_ms !== undefined) s.epoch += 1;
  if (s.scope !== undefined) s.starts = (s.starts ?? 0) + 1;
  s.status = 'running';
  s.last_start_at_ms = ctx.now_ms;
  ctx.actions.push({ kind: 'start', id: s.id, epoch: s.epoch });
}

/**
 * A scoped invocation with no room in its counters (or others ahead of it in its queue) waits
 * in its (scope, limit key) queue as `inboxed` (`pending` in SQL); the fold starts it when a
 * slot frees (`admitWaiting`). True when it waits.
 */
function waitsForSlot(ctx: FoldContext, s: InvocationStatus): boolean {
  if (s.scope === undefined) return false;
  const limitKey = s.limit_key ?? '';
  const flow = ctx.state.flow;
  if (flow.mayRun(s.scope, limitKey)) return false;
  s.status = 'inboxed';
  s.inboxed_at_ms = ctx.now_ms;
  startWait(ctx, s, waitReason(ctx, s.scope, limitKey));
  s.flow_seq = flow.enqueue(s.scope, limitKey, s.id, s.priority ?? 0);
  // Looked at again after the command: one waiting only for its rate needs a wake-up timer.
  flow.released.add(s.scope);
  return true;
}

/**
 * After a command freed slots (or changed the rules): the invocations waiting in those scopes
 * take the free slots, fairly between limit keys (FlowControl.next). Each start is counted at
 * once (putStatus), so the next pick sees it.
 */
export function admitWaiting(ctx: FoldContext): void {
  const flow = ctx.state.flow;
  let wake: { at_ms: number; seq: number; id: string } | undefined;
  for (const scope of [...flow.released]) {
    for (let next = flow.next(scope); next !== undefined; next = flow.next(scope)) {
      const s = ctx.state.status(next.entry.id);
      assert(s !== undefined && s.status === 'inboxed' && s.flow_seq === next.entry.seq, () => `vqueue ${scope}:${next!.limitKey} names ${next!.entry.id}, which is ${s?.status ?? 'unknown'} at ${s?.flow_seq}`);
      flow.remove(scope, next.limitKey, s.id, true);
      delete s.flow_seq;
      s.modified_at_ms = ctx.now_ms;
      endWait(ctx, s);
      run(ctx, s);
      ctx.state.putStatus(s);
    }
    const w = flow.wakeAt(scope);
    if (w !== undefined && (wake === undefined || w.at_ms < wake.at_ms || (w.at_ms === wake.at_ms && w.seq < wake.seq))) wake = w;
  }
  flow.released.clear();
  // One timer for the earliest, chosen by time and sequence: the same on every replica of the log.
  if (wake !== undefined) wakeFlowAt(ctx, wake.at_ms, wake.id);
}

/**
 * Before a command, when a rate-limited head's time has come (its FLOW timer may not be folded
 * yet): the waiters go first, so a new arrival cannot take the rate's next start from them.
 */
export function admitDue(ctx: FoldContext): void {
  const due = ctx.state.counters.flow_wake_ms;
  if (due === undefined || due > ctx.now_ms) return;
  ctx.state.setFlowWake(undefined);
  for (const scope of ctx.state.flow.queues.keys()) ctx.state.flow.released.add(scope);
  admitWaiting(ctx);
}

/**
 * A rate-limited queue head may start at `at_ms`: a FLOW timer (on any invocation id of this
 * partition; one pending at or before that time is enough) makes the fold look again then.
 */
function wakeFlowAt(ctx: FoldContext, at_ms: number, anyId: string): void {
  const wake_up_ms = Math.ceil(at_ms);
  const pending = ctx.state.counters.flow_wake_ms;
  if (pending !== undefined && pending <= wake_up_ms && pending > ctx.now_ms) return;
  ctx.state.setFlowWake(wake_up_ms);
  const timer = { id: anyId, completion_id: 0, wake_up_ms, kind: TimerKind.FLOW };
  ctx.state.putTimer(timer);
  ctx.actions.push({ kind: 'timer', timer });
}

/** Takes an invocation waiting for a slot out of its queue (it is cancelled or killed). */
export function leaveQueue(ctx: FoldContext, s: InvocationStatus): void {
  if (s.flow_seq === undefined || s.scope === undefined) return;
  ctx.state.flow.remove(s.scope, s.limit_key ?? '', s.id);
  delete s.flow_seq;
}

/** Exclusive handlers of objects and a workflow's run hold their key's lock while they run. */
export function needsLock(s: InvocationStatus): boolean {
  return (s.service_type === 'VirtualObject' && s.handler_type !== 'Shared') || (s.service_type === 'Workflow' && s.handler_type === 'Workflow');
}

/**
 * What one joining the (scope, limit key) queue now waits for: nothing counted while the queue is
 * paused; a rate when a slot is free but the rate is not; otherwise a concurrency slot (or the
 * ones ahead of it). Decided as the wait (or a stretch of it) begins.
 */
export function waitReason(ctx: FoldContext, scope: string, limitKey: string): BlockedOn | undefined {
  const flow = ctx.state.flow;
  if (flow.isPaused(scope, limitKey)) return undefined;
  return flow.fullCounter(scope, limitKey) === undefined && flow.rateReadyAt(scope, limitKey) > ctx.now_ms ? 'throttling_rules' : 'concurrency_rules';
}

/** A stretch of waiting for `on` begins now (scoped invocations only: only theirs are shown; none while paused). */
export function startWait(ctx: FoldContext, s: InvocationStatus, on: BlockedOn | undefined): void {
  if (on === undefined || s.scope === undefined) return dropWait(s);
  s.waits_on = on;
  s.wait_since_ms = ctx.now_ms;
}

/** It waits no more without a stretch being counted (cancelled, killed). */
export function dropWait(s: InvocationStatus): void {
  delete s.waits_on;
  delete s.wait_since_ms;
}

/**
 * A stretch of waiting ends (it takes its slot or its key's lock, or its queue is paused): its
 * time is counted against what it waited for, for the attempt it waits to start and in all.
 */
export function endWait(ctx: FoldContext, s: InvocationStatus): void {
  const on = s.waits_on;
  const since = s.wait_since_ms;
  dropWait(s);
  if (on === undefined || since === undefined) return;
  const waited_ms = Math.max(0, ctx.now_ms - since);
  if (waited_ms === 0 && s.blocked_ms === undefined) return;
  const attempt = nextAttempt(s);
  const b = s.blocked_ms?.attempt === attempt ? s.blocked_ms : { attempt, latest: {}, total: s.blocked_ms?.total ?? {} };
  b.latest[on] = (b.latest[on] ?? 0) + waited_ms;
  b.total[on] = (b.total[on] ?? 0) + waited_ms;
  s.blocked_ms = b;
}

/** A new (or scheduled) invocation starts now, or waits in its key's inbox for the lock, or for a flow-control slot. */
export function startOrEnqueue(ctx: FoldContext, s: InvocationStatus): void {
  s.modified_at_ms = ctx.now_ms;
  // One that waited in its key's inbox takes the lock now.
  if (s.status === 'inboxed') endWait(ctx, s);
  if (needsLock(s)) {
    const key = objectKeyOf(s.service, s.key, s.scope);
    if (ctx.state.lockOf(key) !== undefined) {
      s.status = 'inboxed';
      s.inboxed_at_ms = ctx.now_ms;
      startWait(ctx, s, 'lock');
      ctx.state.enqueueInbox(key, s.id);
      return;
    }
    ctx.state.setLock(key, s.id, ctx.now_ms);
  }
  if (waitsForSlot(ctx, s)) return;
  run(ctx, s);
}

export interface NotificationId {
  completion?: number;
  signal?: number;
  named_signal?: string;
}

/**
 * Records a notification in the journal and delivers it: forwarded to the live attempt, or
 * resuming a suspended invocation that waits for it. Other states replay it on their next attempt.
 */
export function notify(ctx: FoldContext, s: InvocationStatus, entry: JournalEntry, id: NotificationId): void {
  assert(s.status !== 'completed', () => `notification for ${s.id}, which has completed`);
  ctx.state.appendEntry(s, entry);
  s.modified_at_ms = ctx.now_ms;
  if (s.status === 'running') {
    ctx.actions.push({ kind: 'forward', id: s.id, epoch: s.epoch, type: entry.type, payload: entry.payload });
  } else if (s.status === 'suspended' && s.waiting !== undefined && awaits(s.waiting, id)) {
    resume(ctx, s);
  }
}

function awaits(w: NonNullable<InvocationStatus['waiting']>, id: NotificationId): boolean {
  return (
    (id.completion !== undefined && w.completions.includes(id.completion)) ||
    (id.signal !== undefined && w.signals.includes(id.signal)) ||
    (id.named_signal !== undefined && w.named_signals.includes(id.named_signal))
  );
}

/** True when the journal already holds a notification the suspension waits for. */
export function anyArrived(journal: readonly JournalEntry[], w: NonNullable<InvocationStatus['waiting']>): boolean {
  for (const e of journal) {
    if (!isNotification(e.type)) continue;
    const n = decode(pb.Notification, e.payload);
    if (awaits(w, { completion: n.completion_id, signal: n.signal_id, named_signal: n.signal_name })) return true;
  }
  return false;
}

/** A journal entry for a notification of `type`: its id (completion or signal) and its result. */
export function notification(type: number, fields: Notification): JournalEntry {
  return { type, payload: Buffer.from(encode(pb.Notification, fields)) };
}

/** An invocation result in the form log commands carry it (value / failure / void). */
export function resultMsg(r: InvocationResult | undefined): ResultMsg {
  if (r === undefined) return { void: true };
  if (r.failure) return { failure: { code: r.failure.code, message: r.failure.message, ...(r.failure.metadata ? { metadata: r.failure.metadata } : {}) } };
  return { value: Buffer.from(r.value ?? '', 'base64') };
}

/** A result carried by a command, as the protocol's Notification carries it. */
export function protocolResult(r: ResultMsg): Pick<Notification, 'value' | 'failure' | 'void'> {
  if (r.failure) return { failure: { code: r.failure.code ?? 500, message: r.failure.message ?? '', metadata: r.failure.metadata ?? [] } };
  if (r.value !== undefined) return { value: { content: r.value } };
  return { void: {} };
}

/** Sends a command to the partition of `target` through this partition's outbox. */
export function sendTo(ctx: FoldContext, target: string, kind: CommandKind): void {
  const seq = ctx.state.counters.outbox_seq + 1;
  const command = encodeCommand({ ...kind, timestamp_ms: ctx.now_ms, source_partition: ctx.state.partition, source_seq: seq });
  const entry = ctx.state.addOutbox(target, command);
  assert(entry.seq === seq, () => `outbox entry got sequence ${entry.seq}, expected ${seq}`);
  ctx.actions.push({ kind: 'outbox', entry });
}

/** Sends a result to an invocation waiting on `completion_id` with a notification of `entry_type`. */
export function sendResult(ctx: FoldContext, waiter: string, completion_id: number, entry_type: number, result: ResultMsg): void {
  const id = InvocationId.parse(waiter);
  assert(id !== undefined, () => `result for ${waiter}, which is not an invocation id`);
  sendTo(ctx, waiter, { kind: 'call_result', call_result: { invocation_id: id.bytes, completion_id, entry_type, ...result } });
}

/**
 * Completes an invocation: records the result, releases its key, hands the result to its
 * caller and attached invocations, and wakes waiting clients.
 */
export function complete(ctx: FoldContext, s: InvocationStatus, result: InvocationResult): void {
  assert(s.status !== 'completed', () => `${s.id} completes twice`);
  // `output` is cleared, not deleted: a delete makes the object a hash table (~1.7 KB, kept in the
  // cache of idle statuses), and JSON leaves an undefined field out. Safe here only because nothing
  // sets `output` again once completed: a slot filled again later (as resume's deletes would be)
  // would give a cached status another key order, so other stored bytes, than one read back.
  delete s.next_retry_at_ms;
  delete s.waiting;
  if (s.output !== undefined) s.output = undefined;
  s.status = 'completed';
  s.result = result;
  s.completed_at_ms = ctx.now_ms;
  s.modified_at_ms = ctx.now_ms;
  ctx.state.forgetJournal(s.id);
  ctx.state.indexExpiry(s);
  // An invocation on a key is an access of its state (for a TTL that counts accesses).
  if (ctx.state.ttl.of(s.service)?.on_access === true && s.service_type !== 'Service') {
    const objectKey = objectKeyOf(s.service, s.key, s.scope);
    // A key with no state has nothing to expire: no row for it.
    if (ctx.state.stateKeys(objectKey).length > 0) ctx.state.ttl.touch(s.service, objectKey, ctx.now_ms, 'access');
  }
  if (needsLock(s)) releaseLock(ctx, s);
  if (s.caller_id !== undefined) sendResult(ctx, s.caller_id, s.caller_completion_id ?? 0, MessageType.CallCompletion, resultMsg(result));
  for (const a of s.attachers ?? []) sendResult(ctx, a.id, a.completion_id, a.entry_type, resultMsg(result));
  delete s.attachers;
  ctx.actions.push({ kind: 'completed', id: s.id });
}

function releaseLock(ctx: FoldContext, s: InvocationStatus): void {
  const key = objectKeyOf(s.service, s.key, s.scope);
  if (ctx.state.lockOf(key) !== s.id) return;
  ctx.state.setLock(key, undefined);
  const next = ctx.state.inboxes.get(key)?.[0];
  if (next === undefined) return;
  ctx.state.removeFromInbox(key, next.id);
  const n = ctx.state.status(next.id);
  assert(n !== undefined && n.status === 'inboxed', () => `inbox of ${key} names ${next.id}, which is ${n?.status ?? 'unknown'}`);
  startOrEnqueue(ctx, n);
  ctx.state.putStatus(n);
}
