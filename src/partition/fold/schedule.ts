import { assertNever } from '../../common/assert.js';
import { InvocationId, idempotentInvocationId, scheduleId, workflowInvocationId } from '../../common/ids.js';
import { DEFAULT_LATE_AFTER_MS, MIN_EVERY_MS, cronProblem, firingsBetween, nextFiring, type ScheduleTimes } from '../../common/schedule-times.js';
import { ManageAction, ScheduleAction, TimerKind, type CallResult, type Schedule, type ScheduleSpec } from '../../log/commands.js';
import { CATCH_UPS, MAX_QUEUED_FIRINGS, OVERLAPS, type CatchUp, type Overlap, type ScheduleRecord } from '../../storage/tables/schedules.js';
import { sendTo, type FoldContext } from './context.js';

// Schedules (Keel's own): each firing is an ordinary invocation whose caller is the schedule, so
// the firing's end comes back here as a call result. Everything is decided at the log's time:
// a rebuild, or another node taking the partition over, fires exactly what this fold fired.

/** Headers every firing carries: which schedule, and the time it fired for (RFC 3339). */
export const SCHEDULE_HEADER = 'x-keel-schedule';
export const SCHEDULE_TIME_HEADER = 'x-keel-schedule-time';

type How = 'on-time' | 'manual' | 'catch-up-all';

const timesOf = (s: ScheduleRecord): ScheduleTimes => ({ cron: s.cron, timezone: s.timezone, every_ms: s.every_ms, anchor_ms: s.anchor_ms });

export function foldSchedule(ctx: FoldContext, cmd: Schedule): void {
  const name = cmd.name ?? '';
  const id = scheduleId(name).text;
  const stored = ctx.state.schedule(id);
  // A deleted schedule whose firings still run is kept as a tombstone (their results come back
  // here): only a new SET sees it, to go on numbering firings after them.
  const s = stored?.deleted === true ? undefined : stored;
  const action = (cmd.action ?? ScheduleAction.SET) as (typeof ScheduleAction)[keyof typeof ScheduleAction];
  switch (action) {
    case ScheduleAction.SET:
      return set(ctx, id, name, cmd.spec ?? {}, stored);
    case ScheduleAction.DELETE:
      if (s === undefined) return;
      disarm(ctx, s);
      return bury(ctx, s);
    case ScheduleAction.PAUSE:
      if (s === undefined || s.paused) return;
      disarm(ctx, s);
      s.paused = true;
      // What waited for the running firing does not start while paused.
      s.skipped += s.queued.length + (s.buffered_ms !== undefined ? 1 : 0);
      s.queued = [];
      delete s.buffered_ms;
      return put(ctx, s);
    case ScheduleAction.RESUME:
      if (s === undefined || !s.paused) return;
      s.paused = false;
      arm(ctx, s, ctx.now_ms);
      return put(ctx, s);
    case ScheduleAction.TRIGGER:
      if (s === undefined) return;
      fire(ctx, s, ctx.now_ms, 'manual');
      return put(ctx, s);
    default:
      assertNever(action, 'Schedule.action');
  }
}

/** Deletes a schedule; one with firings still running stays as a tombstone until their results came back. */
function bury(ctx: FoldContext, s: ScheduleRecord): void {
  if (s.in_flight === 0) return ctx.state.deleteSchedule(s.id);
  s.deleted = true;
  s.queued = [];
  delete s.buffered_ms;
  delete s.running;
  s.modified_at_ms = ctx.now_ms;
  put(ctx, s);
}

/** What a SET must carry to be folded (the admin API checked it; a log record never stops the partition). */
function usable(spec: ScheduleSpec): boolean {
  const cron = spec.cron ?? '';
  const every = spec.every_ms ?? 0;
  if ((cron === '') === (every === 0)) return false;
  if (cron !== '' && cronProblem(cron, spec.timezone || undefined) !== undefined) return false;
  if (cron === '' && every < MIN_EVERY_MS) return false;
  return Boolean(spec.service && spec.handler) && OVERLAPS.includes(spec.overlap as Overlap) && CATCH_UPS.includes(spec.catchup as CatchUp);
}

/** A new schedule, or a new definition of one: counters and running firings are kept; an unchanged one changes nothing. */
function set(ctx: FoldContext, id: string, name: string, spec: ScheduleSpec, before: ScheduleRecord | undefined): void {
  if (!usable(spec)) return;
  const definition: Definition = {
    service: spec.service!, handler: spec.handler!, key: spec.key ?? '', input: spec.input ?? Buffer.alloc(0),
    headers: (spec.headers ?? []).map((h) => ({ key: h.key ?? '', value: h.value ?? '' })),
    service_type: spec.service_type || 'Service', handler_type: spec.handler_type ?? '',
    completion_retention_ms: spec.completion_retention_ms ?? 0, journal_retention_ms: spec.journal_retention_ms ?? 0,
    ...(spec.cron ? { cron: spec.cron, ...(spec.timezone ? { timezone: spec.timezone } : {}) } : { every_ms: spec.every_ms! }),
    overlap: spec.overlap as Overlap, catchup: spec.catchup as CatchUp, late_after_ms: spec.late_after_ms || DEFAULT_LATE_AFTER_MS, paused: spec.paused ?? false, from_config: spec.from_config ?? false,
  };
  if (before !== undefined && before.deleted !== true && sameDefinition(before, definition)) return;
  // A schedule made anew over a tombstone numbers its firings after the old ones: an old
  // firing's result is never taken for one of the new schedule's.
  const fresh = before === undefined || before.deleted === true;
  const s: ScheduleRecord = fresh
    ? { seq: before?.seq ?? 0, first_seq: (before?.seq ?? 0) + 1, fired: 0, skipped: 0, in_flight: before?.in_flight ?? 0, queued: [], created_at_ms: ctx.now_ms, ...definition, id, name, modified_at_ms: ctx.now_ms, anchor_ms: ctx.now_ms }
    : { ...before, ...definition, id, name, modified_at_ms: ctx.now_ms, anchor_ms: ctx.now_ms };
  delete s.deleted;
  // A cron replaced by an interval (or the other way round): what the old definition had goes.
  if (definition.cron === undefined) delete s.cron;
  if (definition.timezone === undefined) delete s.timezone;
  if (definition.every_ms === undefined) delete s.every_ms;
  if (before !== undefined) disarm(ctx, before);
  delete s.next_at_ms;
  if (s.paused) {
    // Created or set paused: nothing waits to start, as after a pause.
    s.skipped += s.queued.length + (s.buffered_ms !== undefined ? 1 : 0);
    s.queued = [];
    delete s.buffered_ms;
  } else arm(ctx, s, ctx.now_ms);
  put(ctx, s);
}

type Definition = Omit<ScheduleRecord, 'id' | 'name' | 'created_at_ms' | 'modified_at_ms' | 'anchor_ms' | 'seq' | 'fired' | 'skipped' | 'in_flight' | 'queued'>;

/** The fields a definition sets, in one order (what a SET compares). */
const canonical = (d: Definition): string =>
  JSON.stringify([d.service, d.handler, d.key, d.input.toString('base64'), d.headers.map((h) => [h.key, h.value]), d.service_type, d.handler_type,
    d.completion_retention_ms, d.journal_retention_ms, d.cron ?? null, d.timezone ?? null, d.every_ms ?? null, d.overlap, d.catchup, d.late_after_ms, d.paused, d.from_config]);

function sameDefinition(s: ScheduleRecord, d: Definition): boolean {
  return canonical(s) === canonical(d);
}

function put(ctx: FoldContext, s: ScheduleRecord): void {
  ctx.state.putSchedule(s);
}

/** Arms the timer of the first firing after `after_ms` (none when the cron has no more). */
function arm(ctx: FoldContext, s: ScheduleRecord, after_ms: number): void {
  const next = nextFiring(timesOf(s), after_ms);
  if (next === undefined) {
    delete s.next_at_ms;
    return;
  }
  s.next_at_ms = next;
  const timer = { id: s.id, completion_id: 0, wake_up_ms: next, kind: TimerKind.SCHEDULE };
  ctx.state.putTimer(timer);
  ctx.actions.push({ kind: 'timer', timer });
}

function disarm(ctx: FoldContext, s: ScheduleRecord): void {
  if (s.next_at_ms === undefined) return;
  // A timer already in the worker's memory may still fire: the fold finds it gone and ignores it.
  ctx.state.deleteTimer({ id: s.id, completion_id: 0, wake_up_ms: s.next_at_ms, kind: TimerKind.SCHEDULE });
  delete s.next_at_ms;
}

/** The timer of a schedule is due (`due_ms`, its firing time): it fires, or catches up, and the next one is armed. */
export function foldScheduleDue(ctx: FoldContext, id: string, due_ms: number): void {
  const s = ctx.state.schedule(id);
  if (s === undefined || s.deleted === true || s.paused || s.next_at_ms !== due_ms) return;
  delete s.next_at_ms;
  if (ctx.now_ms - due_ms <= s.late_after_ms) onTime(ctx, s, due_ms);
  else catchUp(ctx, s, due_ms);
  arm(ctx, s, Math.max(due_ms, ctx.now_ms));
  put(ctx, s);
}

/**
 * Due within `late_after`: the firing, and any that fell due since (a timer held up, an interval
 * shorter than the delay), each as on time: the overlap policy decides each, none is lost unsaid.
 */
function onTime(ctx: FoldContext, s: ScheduleRecord, due_ms: number): void {
  const since = firingsBetween(timesOf(s), due_ms, ctx.now_ms);
  s.skipped += since.more;
  for (const at of since.times.length > 0 ? since.times : [due_ms]) fire(ctx, s, at, 'on-time');
}

/** Firings missed while the server was down, from `due_ms` to now: none, the first, or each in order. */
function catchUp(ctx: FoldContext, s: ScheduleRecord, due_ms: number): void {
  const missed = firingsBetween(timesOf(s), due_ms, ctx.now_ms);
  const count = missed.times.length + missed.more;
  switch (s.catchup) {
    case 'skip':
      s.skipped += count;
      return;
    case 'one':
      // The first of them (as Temporal's catch-up does): it carries the time the outage began.
      s.skipped += count - 1;
      fire(ctx, s, due_ms, 'on-time');
      return;
    case 'all':
      s.skipped += missed.more;
      for (const at of missed.times) fire(ctx, s, at, 'catch-up-all');
      return;
    default:
      assertNever(s.catchup, 'schedule catch-up');
  }
}

/**
 * A firing for `fire_ms`: started, or (a firing still running) skipped, buffered or started after
 * cancelling the running one, as the overlap policy says. While a catch-up `all` runs (missed
 * firings wait, or the one running came from that line), every firing waits in line behind them,
 * whatever the policy (but allow_all's, which starts everything at once): a catch-up that runs
 * every missed firing loses none of those that fall due meanwhile.
 */
function fire(ctx: FoldContext, s: ScheduleRecord, fire_ms: number, how: How): void {
  if (s.running !== undefined && s.overlap !== 'allow_all') {
    if (how === 'catch-up-all' || s.queued.length > 0 || s.running.catch_up === true) return enqueue(s, fire_ms);
    switch (s.overlap) {
      case 'skip':
        s.skipped += 1;
        return;
      case 'buffer_one':
        if (s.buffered_ms !== undefined) s.skipped += 1;
        s.buffered_ms = fire_ms;
        return;
      case 'cancel_other': {
        const running = InvocationId.parse(s.running.invocation_id)!;
        sendTo(ctx, running.text, { kind: 'manage', manage: { invocation_id: running.bytes, action: ManageAction.CANCEL } });
        break;
      }
      default:
        assertNever(s.overlap, 'schedule overlap');
    }
  }
  start(ctx, s, fire_ms, how === 'manual', how === 'catch-up-all');
}

function enqueue(s: ScheduleRecord, fire_ms: number): void {
  if (s.queued.length >= MAX_QUEUED_FIRINGS) s.skipped += 1;
  else s.queued.push(fire_ms);
}

/**
 * Starts a firing: an invocation with an idempotency key made of the schedule and the firing time
 * (a workflow: a run whose id is the key prefix, the schedule's name and that time), so that the
 * same firing sent twice is one invocation. A manual one carries its sequence number as well: two
 * in one millisecond are two.
 */
function start(ctx: FoldContext, s: ScheduleRecord, fire_ms: number, manual: boolean, fromLine: boolean): void {
  const seq = ++s.seq;
  const at = new Date(fire_ms).toISOString();
  const label = manual ? `${at}-manual-${seq}` : at;
  const workflow = s.service_type === 'Workflow' && s.handler_type === 'Workflow';
  // A run per firing, named by the schedule too: two schedules of one workflow never share a run.
  const key = workflow ? `${s.key}-${s.name}-${label}` : s.key;
  const idempotency_key = `schedule/${s.name}/${label}`;
  const target = workflow ? workflowInvocationId(s.service, key) : idempotentInvocationId(s.service, key, s.handler, idempotency_key);
  sendTo(ctx, target.text, {
    kind: 'invoke',
    invoke: {
      invocation_id: target.bytes,
      service: s.service,
      handler: s.handler,
      key,
      input: s.input,
      headers: [...s.headers, { key: SCHEDULE_HEADER, value: s.name }, { key: SCHEDULE_TIME_HEADER, value: at }],
      ...(workflow ? {} : { idempotency_key }),
      service_type: s.service_type,
      handler_type: s.handler_type,
      completion_retention_ms: s.completion_retention_ms,
      journal_retention_ms: s.journal_retention_ms,
      caller_invocation_id: InvocationId.parse(s.id)!.bytes,
      caller_completion_id: seq,
      caller_target: `schedule/${s.name}`,
    },
  });
  s.running = { seq, invocation_id: target.text, fire_ms, ...(fromLine ? { catch_up: true } : {}) };
  s.in_flight += 1;
  s.fired += 1;
  s.last_fire_ms = fire_ms;
  s.last_invocation_id = target.text;
  s.modified_at_ms = ctx.now_ms;
}

/**
 * A firing ended (the result its invocation sends its caller, the schedule): the outcome is
 * recorded, and a firing that waited for it starts. Nothing for a schedule deleted meanwhile.
 */
export function foldScheduleResult(ctx: FoldContext, id: string, cmd: CallResult): void {
  const s = ctx.state.schedule(id);
  if (s === undefined) return;
  const seq = cmd.completion_id ?? 0;
  s.in_flight = Math.max(0, s.in_flight - 1);
  if (s.deleted === true) {
    if (s.in_flight === 0) ctx.state.deleteSchedule(id);
    else put(ctx, s);
    return;
  }
  // A firing of a schedule deleted before this one was made: counted, nothing else.
  if (seq < (s.first_seq ?? 1)) return put(ctx, s);
  if (s.last_outcome === undefined || seq > s.last_outcome.seq) {
    const running = s.running?.seq === seq ? s.running : undefined;
    s.last_outcome = {
      seq, ended_at_ms: ctx.now_ms,
      ...(running ? { invocation_id: running.invocation_id, fire_ms: running.fire_ms } : {}),
      ...(cmd.failure ? { failure: { code: cmd.failure.code ?? 500, message: cmd.failure.message ?? '' } } : {}),
    };
  }
  if (s.running?.seq === seq) {
    delete s.running;
    const line = s.queued.shift();
    if (line !== undefined) start(ctx, s, line, false, true);
    else if (s.buffered_ms !== undefined) {
      const buffered = s.buffered_ms;
      delete s.buffered_ms;
      start(ctx, s, buffered, false, false);
    }
  }
  put(ctx, s);
}
