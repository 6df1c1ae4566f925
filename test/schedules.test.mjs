// Schedules (Keel's own, P14): when a cron expression or an interval fires (daylight-saving days,
// the ends of months), what the fold does with a firing at the log's time (overlap and catch-up
// policies, pause, resume, trigger, a rebuild), and a real TS SDK object fired through /schedules
// across a SIGKILL and a downtime, counted from the handler's side.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { partition, outbox, MessageType, TimerKind, InvocationId } from './helpers/fold.mjs';
import { startKeel, serveServices, register, ingress, adminCall, query, eventually } from './helpers/keel.mjs';
import { nextFiring, firingsBetween, cronProblem } from '../dist/common/schedule-times.js';
import { scheduleId } from '../dist/common/ids.js';

const iso = (ms) => new Date(ms).toISOString();
const walk = (times, from, n) => {
  const out = [];
  for (let at = Date.parse(from); out.length < n; ) out.push(iso((at = nextFiring(times, at))));
  return out;
};

t.test('times: daylight saving in Europe/Berlin, a wall time the spring skips and one the autumn repeats', async (t) => {
  const daily = { cron: '30 2 * * *', timezone: 'Europe/Berlin', anchor_ms: 0 };
  t.same(walk(daily, '2026-03-27T12:00:00Z', 3), ['2026-03-28T01:30:00.000Z', '2026-03-29T01:00:00.000Z', '2026-03-30T00:30:00.000Z'],
    '29 March (02:00 → 03:00): 02:30 does not exist, it fires once at 03:00 CEST');
  t.same(walk(daily, '2026-10-24T12:00:00Z', 2), ['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z'],
    '25 October (03:00 → 02:00): 02:30 happens twice, it fires once, at the first');
  const hourly = { cron: '0 * * * *', timezone: 'Europe/Berlin', anchor_ms: 0 };
  t.same(walk(hourly, '2026-10-24T23:30:00Z', 4), ['2026-10-25T00:00:00.000Z', '2026-10-25T01:00:00.000Z', '2026-10-25T02:00:00.000Z', '2026-10-25T03:00:00.000Z'],
    'hourly fires every real hour through the repeated one');
});

t.test('times: the ends of months, seconds, intervals, bad expressions', async (t) => {
  t.same(walk({ cron: '0 12 31 * *', anchor_ms: 0 }, '2026-01-01T00:00:00Z', 3), ['2026-01-31T12:00:00.000Z', '2026-03-31T12:00:00.000Z', '2026-05-31T12:00:00.000Z'],
    'the 31st: months without one are skipped (UTC when no zone is given)');
  t.same(walk({ cron: '0 12 L * *', anchor_ms: 0 }, '2026-01-01T00:00:00Z', 3), ['2026-01-31T12:00:00.000Z', '2026-02-28T12:00:00.000Z', '2026-03-31T12:00:00.000Z'], 'L: the last day of each month');
  t.same(walk({ cron: '*/5 * * * * *', anchor_ms: 0 }, '2026-01-01T00:00:01.500Z', 2), ['2026-01-01T00:00:05.000Z', '2026-01-01T00:00:10.000Z'], 'six fields: seconds first');
  const every = { every_ms: 10_000, anchor_ms: 1_000 };
  t.equal(nextFiring(every, 1_000), 11_000, 'an interval fires one interval after its anchor');
  t.equal(nextFiring(every, 11_000), 21_000, 'strictly after');
  t.same(firingsBetween(every, 11_000, 41_000), { times: [11_000, 21_000, 31_000, 41_000], more: 0 }, 'both ends included');
  t.same(firingsBetween(every, 11_000, 41_000, 2), { times: [11_000, 21_000], more: 2 }, 'past the limit: counted');
  t.match(cronProblem('61 * * * *'), /not valid.*minute/);
  t.match(cronProblem('* * * * *', 'Mars/Olympus'), /time zone 'Mars\/Olympus'.*not valid/);
  t.match(cronProblem('* * * * * * *'), /not valid/, 'seven fields (years) are not taken');
  t.equal(cronProblem('0 9 * * MON-FRI', 'America/New_York'), undefined);
});

// ---------------------------------------------------------------------------------- the fold

const SEC = 1000;
const spec = (fields = {}) => ({
  service: 'Obj', handler: 'tick', key: 'k', input: Buffer.from('{"n":1}'), headers: [{ key: 'content-type', value: 'application/json' }],
  service_type: 'VirtualObject', handler_type: 'Exclusive', completion_retention_ms: 86_400_000, journal_retention_ms: 0,
  every_ms: 10 * SEC, overlap: 'skip', catchup: 'one', late_after_ms: 60 * SEC, ...fields,
});
const SET = 0, DELETE = 1, PAUSE = 2, RESUME = 3, TRIGGER = 4;
const cmd = (action, name, fields) => ({ kind: 'schedule', schedule: { action, name, ...(fields ? { spec: spec(fields) } : {}) } });
const due = (name, at) => ({ kind: 'timer_fired', timer_fired: { invocation_id: scheduleId(name).bytes, completion_id: 0, wake_up_ms: at, kind: TimerKind.SCHEDULE } });
const ended = (name, seq, failure) => ({
  kind: 'call_result',
  call_result: { invocation_id: scheduleId(name).bytes, completion_id: seq, entry_type: MessageType.CallCompletion, ...(failure ? { failure } : { value: Buffer.from('1') }) },
});
const invokes = (p) => outbox(p).filter((c) => c.kind === 'invoke').map((c) => c.invoke);
const cancels = (p) => outbox(p).filter((c) => c.kind === 'manage').map((c) => InvocationId.fromBytes(c.manage.invocation_id).text);
const timerOf = (actions) => actions.find((a) => a.kind === 'timer')?.timer;

t.test('fold: set arms the first firing; due, it starts an idempotent invocation with the schedule as its caller', async (t) => {
  const p = partition(0);
  const T0 = 5_000_000;
  const armed = timerOf(p.apply(cmd(SET, 'tick', {}), T0));
  t.same(armed, { id: scheduleId('tick').text, completion_id: 0, wake_up_ms: T0 + 10 * SEC, kind: TimerKind.SCHEDULE }, 'one interval after it was set');
  const next = timerOf(p.apply(due('tick', T0 + 10 * SEC), T0 + 10 * SEC + 5));
  t.equal(next.wake_up_ms, T0 + 20 * SEC, 'the next firing armed');
  const [inv] = invokes(p);
  t.equal(inv.idempotency_key, `schedule/tick/${iso(T0 + 10 * SEC)}`, 'keyed by schedule and firing time');
  t.same({ service: inv.service, handler: inv.handler, key: inv.key, input: inv.input.toString() }, { service: 'Obj', handler: 'tick', key: 'k', input: '{"n":1}' });
  t.same(inv.headers.slice(-2), [{ key: 'x-keel-schedule', value: 'tick' }, { key: 'x-keel-schedule-time', value: iso(T0 + 10 * SEC) }]);
  t.equal(InvocationId.fromBytes(inv.caller_invocation_id).text, scheduleId('tick').text, 'the schedule is the caller');
  t.equal(inv.caller_completion_id, 1, 'firing 1');
  const s = p.state.schedule(scheduleId('tick').text);
  t.same({ fired: s.fired, running: s.running?.seq, next: s.next_at_ms }, { fired: 1, running: 1, next: T0 + 20 * SEC });
  p.apply(ended('tick', 1), T0 + 11 * SEC);
  const after = p.state.schedule(scheduleId('tick').text);
  t.equal(after.running, undefined, 'ended');
  t.same({ seq: after.last_outcome.seq, failure: after.last_outcome.failure, invocation: after.last_outcome.invocation_id }, { seq: 1, failure: undefined, invocation: InvocationId.fromBytes(inv.invocation_id).text });
  t.same(p.apply(due('tick', T0 + 10 * SEC), T0 + 12 * SEC), [], 'the same timer again (redelivered): nothing');
});

t.test('fold: overlap policies while a firing runs', async (t) => {
  const T0 = 5_000_000;
  const run = (overlap) => {
    const p = partition(0);
    p.apply(cmd(SET, 'o', { overlap }), T0);
    p.apply(due('o', T0 + 10 * SEC), T0 + 10 * SEC);
    p.apply(due('o', T0 + 20 * SEC), T0 + 20 * SEC); // firing 1 still runs
    p.apply(due('o', T0 + 30 * SEC), T0 + 30 * SEC);
    return p;
  };
  const sched = (p) => p.state.schedule(scheduleId('o').text);

  const skip = run('skip');
  t.same({ invokes: invokes(skip).length, skipped: sched(skip).skipped }, { invokes: 1, skipped: 2 }, 'skip: the others are dropped, counted');

  const buffer = run('buffer_one');
  t.same({ invokes: invokes(buffer).length, buffered: sched(buffer).buffered_ms, skipped: sched(buffer).skipped }, { invokes: 1, buffered: T0 + 30 * SEC, skipped: 1 }, 'buffer_one: the latest waits, the one before it is dropped');
  buffer.apply(ended('o', 1), T0 + 31 * SEC);
  t.equal(invokes(buffer).length, 2, 'it starts when the running one ends');
  t.equal(invokes(buffer)[1].idempotency_key, `schedule/o/${iso(T0 + 30 * SEC)}`, 'for its own time');

  const all = run('allow_all');
  t.same({ invokes: invokes(all).length, in_flight: sched(all).in_flight }, { invokes: 3, in_flight: 3 }, 'allow_all: each starts');

  const cancel = run('cancel_other');
  t.equal(invokes(cancel).length, 3, 'cancel_other: each starts');
  t.same(cancels(cancel), invokes(cancel).slice(0, 2).map((i) => InvocationId.fromBytes(i.invocation_id).text), 'after cancelling the one that ran');
  cancel.apply(ended('o', 1, { code: 409, message: 'canceled' }), T0 + 31 * SEC);
  t.equal(sched(cancel).running.seq, 3, 'an older firing ending leaves the running one');
  t.same(sched(cancel).last_outcome.failure, { code: 409, message: 'canceled' });
});

t.test('fold: catch-up after a downtime: skip, one, all (in order, one after another)', async (t) => {
  const T0 = 5_000_000;
  const down = (catchup) => {
    const p = partition(0);
    p.apply(cmd(SET, 'c', { catchup, late_after_ms: 2 * SEC }), T0);
    // The timer of T0+10s fires 45 s late: the server was down from T0+9s.
    p.apply(due('c', T0 + 10 * SEC), T0 + 55 * SEC);
    return p;
  };
  const sched = (p) => p.state.schedule(scheduleId('c').text);
  const keys = (p) => invokes(p).map((i) => i.idempotency_key.split('/').pop());

  const skip = down('skip');
  t.same({ invokes: invokes(skip).length, skipped: sched(skip).skipped, next: sched(skip).next_at_ms }, { invokes: 0, skipped: 5, next: T0 + 60 * SEC }, 'skip: the 5 missed firings (10 s … 50 s) are dropped; the next is the first after now');

  const one = down('one');
  t.same(keys(one), [iso(T0 + 10 * SEC)], 'one: the first missed firing, once');
  t.equal(sched(one).skipped, 4);

  const all = down('all');
  t.same(keys(all), [iso(T0 + 10 * SEC)], 'all: the first starts');
  t.same(sched(all).queued, [20, 30, 40, 50].map((s) => T0 + s * SEC), 'the rest wait for it, in order');
  for (let seq = 1; seq <= 4; seq++) all.apply(ended('c', seq), T0 + 56 * SEC + seq);
  all.apply(due('c', T0 + 60 * SEC), T0 + 60 * SEC); // on time, while the catch-up still runs
  for (let seq = 5; seq <= 6; seq++) all.apply(ended('c', seq), T0 + 60 * SEC + seq);
  t.same(keys(all), [10, 20, 30, 40, 50, 60].map((s) => iso(T0 + s * SEC)), 'each missed firing once, in order, and the one due meanwhile after them');
  t.equal(sched(all).skipped, 0, 'nothing skipped, though the overlap policy is skip');

  const late = partition(0);
  late.apply(cmd(SET, 'c', { catchup: 'skip', late_after_ms: 2 * SEC }), T0);
  late.apply(due('c', T0 + 10 * SEC), T0 + 11_500);
  t.equal(invokes(late).length, 1, 'late by less than late_after: an on-time firing, whatever the policy');
});

t.test('fold: pause, resume, trigger, a new definition, delete', async (t) => {
  const T0 = 5_000_000;
  const p = partition(0);
  const id = scheduleId('m').text;
  p.apply(cmd(SET, 'm', {}), T0);
  p.apply({ kind: 'schedule', schedule: { action: PAUSE, name: 'm' } }, T0 + 1);
  t.equal(p.state.schedule(id).next_at_ms, undefined, 'paused: no timer');
  t.same(p.apply(due('m', T0 + 10 * SEC), T0 + 10 * SEC), [], 'the old timer, if the worker still fires it: nothing');
  t.equal(invokes(p).length, 0);
  const resumed = timerOf(p.apply({ kind: 'schedule', schedule: { action: RESUME, name: 'm' } }, T0 + 15 * SEC));
  t.equal(resumed.wake_up_ms, T0 + 20 * SEC, 'resumed: the next firing of the same cadence');
  p.apply({ kind: 'schedule', schedule: { action: TRIGGER, name: 'm' } }, T0 + 16 * SEC);
  p.apply(ended('m', 1), T0 + 16 * SEC + 1);
  p.apply({ kind: 'schedule', schedule: { action: TRIGGER, name: 'm' } }, T0 + 16 * SEC + 2);
  t.same(invokes(p).map((i) => i.idempotency_key), [`schedule/m/${iso(T0 + 16 * SEC)}-manual-1`, `schedule/m/${iso(T0 + 16 * SEC + 2)}-manual-2`], 'a trigger fires now, its own invocation each time');
  t.same(p.apply(cmd(SET, 'm', {}), T0 + 17 * SEC), [], 'the same definition again: nothing changes');
  const redefined = timerOf(p.apply(cmd(SET, 'm', { cron: '0 0 * * *', every_ms: 0 }), T0 + 18 * SEC));
  t.equal(redefined.wake_up_ms, Date.parse('1970-01-02T00:00:00Z'), 'a cron instead: its next time');
  const s = p.state.schedule(id);
  t.same({ every: s.every_ms, fired: s.fired, created: s.created_at_ms }, { every: undefined, fired: 2, created: T0 }, 'counters and creation kept');
  p.apply({ kind: 'schedule', schedule: { action: DELETE, name: 'm' } }, T0 + 19 * SEC);
  t.equal(p.state.schedule(id).deleted, true, 'deleted (a tombstone while the second trigger\'s firing runs)');
  t.equal([...p.store.keys()].filter((k) => k.includes('/timer/')).length, 0, 'with its timer');
  p.apply(ended('m', 2), T0 + 20 * SEC);
  t.equal(p.state.schedule(id), undefined, 'gone once that firing ended');
  t.same(p.apply(cmd(SET, 'bad', { every_ms: 10 }), T0), [], 'a definition the API would refuse (10 ms): not folded');
});

t.test('fold: a timer held up past later firings fires each; a schedule deleted and made again never takes an old firing\'s result', async (t) => {
  const T0 = 5_000_000;
  const p = partition(0);
  p.apply(cmd(SET, 'h', { every_ms: SEC, overlap: 'allow_all' }), T0);
  p.apply(due('h', T0 + SEC), T0 + 3_500); // 2.5 s late, within late_after (60 s)
  t.same(invokes(p).map((i) => i.idempotency_key.split('/').pop()), [1, 2, 3].map((s) => iso(T0 + s * SEC)), 'the firings of 1 s, 2 s and 3 s, each once');
  t.equal(p.state.schedule(scheduleId('h').text).next_at_ms, T0 + 4 * SEC);

  const q = partition(0);
  q.apply(cmd(SET, 'r', {}), T0);
  q.apply(due('r', T0 + 10 * SEC), T0 + 10 * SEC); // firing 1 runs
  q.apply({ kind: 'schedule', schedule: { action: DELETE, name: 'r' } }, T0 + 11 * SEC);
  t.equal(q.state.schedule(scheduleId('r').text).deleted, true, 'kept as a tombstone while its firing runs');
  q.apply({ kind: 'schedule', schedule: { action: TRIGGER, name: 'r' } }, T0 + 11 * SEC + 1);
  t.equal(invokes(q).length, 1, 'a deleted schedule cannot be triggered');
  q.apply(cmd(SET, 'r', {}), T0 + 12 * SEC);
  q.apply(due('r', T0 + 22 * SEC), T0 + 22 * SEC);
  const made = q.state.schedule(scheduleId('r').text);
  t.same({ seq: made.running.seq, fired: made.fired, deleted: made.deleted }, { seq: 2, fired: 1, deleted: undefined }, 'made anew: its firings numbered after the old one');
  q.apply(ended('r', 1, { code: 500, message: 'old' }), T0 + 23 * SEC);
  const after = q.state.schedule(scheduleId('r').text);
  t.same({ running: after.running?.seq, outcome: after.last_outcome, in_flight: after.in_flight }, { running: 2, outcome: undefined, in_flight: 1 }, 'the old firing\'s end is counted, and taken for nothing else');
  q.apply({ kind: 'schedule', schedule: { action: DELETE, name: 'r' } }, T0 + 24 * SEC);
  q.apply(ended('r', 2), T0 + 25 * SEC);
  t.equal(q.state.schedule(scheduleId('r').text), undefined, 'the tombstone goes with the last result');
});

t.test('fold: a workflow target runs a workflow per firing; a rebuild gives the same store', async (t) => {
  const commands = [];
  const p = partition(0);
  const apply = (c, at) => (commands.push([c, at]), p.apply(c, at));
  const T0 = 5_000_000;
  apply(cmd(SET, 'w', { service: 'Flow', handler: 'run', key: 'report', service_type: 'Workflow', handler_type: 'Workflow', overlap: 'allow_all' }), T0);
  apply(due('w', T0 + 10 * SEC), T0 + 10 * SEC);
  apply(due('w', T0 + 20 * SEC), T0 + 20 * SEC);
  t.same(invokes(p).map((i) => [i.key, i.idempotency_key]), [[`report-w-${iso(T0 + 10 * SEC)}`, undefined], [`report-w-${iso(T0 + 20 * SEC)}`, undefined]], 'workflow ids: the key, the schedule and the firing time');
  apply(ended('w', 2), T0 + 21 * SEC);
  apply(ended('w', 1, { code: 500, message: 'boom' }), T0 + 22 * SEC);
  const s = p.state.schedule(scheduleId('w').text);
  t.same({ seq: s.last_outcome.seq, failure: s.last_outcome.failure, in_flight: s.in_flight }, { seq: 2, failure: undefined, in_flight: 0 }, 'the outcome is the latest firing\'s, not the last to end');
  const again = partition(0, 1);
  for (const [c, at] of commands) again.apply(c, at);
  t.same([...again.store].sort(), [...p.store].sort(), 'same keys and values');
});

// ---------------------------------------------------------------------------------- a server

const Ticker = restate.object({
  name: 'Ticker',
  handlers: {
    tick: async (ctx, input) => {
      const at = ctx.request().headers.get('x-keel-schedule-time');
      const seen = (await ctx.get('seen')) ?? [];
      // When it ran: how late a firing was (a test's observation, not durable logic).
      seen.push({ at, ran: Date.now(), schedule: ctx.request().headers.get('x-keel-schedule'), n: input?.n ?? null });
      ctx.set('seen', seen);
      return seen.length;
    },
    seen: restate.handlers.object.shared(async (ctx) => (await ctx.get('seen')) ?? []),
  },
});

t.test('server: PUT /schedules on a TS SDK object; SQL; pause, trigger, delete; catch-up after a downtime, none lost, none doubled', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [Ticker]));

  const refused = [
    [{ target: 'Ticker/tick', every: '1s' }, /is a VirtualObject: its target needs a key/],
    [{ target: 'Nope/k/tick', every: '1s' }, /target service 'Nope' is not registered/],
    [{ target: 'Ticker/k/tick', every: '10ms' }, /every must be an interval from 1s/],
    [{ target: 'Ticker/k/tick', cron: '* * *' }, /cron expression '\* \* \*'.*not valid/],
    [{ target: 'Ticker/k/tick', cron: '* * * * *', every: '1s' }, /exactly one of the fields cron/],
    [{ target: 'Ticker/k/tick', every: '1s', overlap: 'sometimes' }, /overlap must be one of skip, buffer_one, allow_all, cancel_other/],
    [{ target: 'Ticker/k/tick', cron: '0 9 * * *', timeZone: 'Europe/Berlin' }, /unknown field 'timeZone'/],
    [{ target: 'Ticker/k/tick', cron: '2020-01-01T00:00:00' }, /takes 5 fields/],
    [{ target: 'Ticker/k/tick', cron: '0 0 1 1 * 2020' }, /never fires again|not valid/],
  ];
  for (const [body, why] of refused) {
    const r = await adminCall(keel, 'PUT', '/schedules/bad', body);
    t.equal(r.status, 400, JSON.stringify(body));
    t.match(r.json?.message ?? r.text, why);
    t.equal(r.json?.restate_code ?? r.json?.code, 'KEEL1001');
  }
  t.equal((await adminCall(keel, 'PUT', '/schedules/bad%20name', { target: 'Ticker/k/tick', every: '1s' })).status, 400, 'a bad name');
  t.equal((await adminCall(keel, 'GET', '/schedules/none')).status, 404);

  // Three schedules of 1 s over one downtime, one per catch-up policy, on keys of their own.
  for (const catchup of ['all', 'one', 'skip']) {
    const r = await adminCall(keel, 'PUT', `/schedules/every-${catchup}`, { target: `Ticker/${catchup}/tick`, every: '1s', catchup, late_after: '1s', input: { n: 7 } });
    t.equal(r.status, 201, r.text);
    t.equal(r.json.every, '1s');
  }
  t.equal((await adminCall(keel, 'PUT', '/schedules/every-all', { target: 'Ticker/all/tick', every: '1s', catchup: 'all', late_after: '1s', input: { n: 7 } })).status, 200, 'the same again: 200');
  const seen = async (key) => (await ingress(keel, `/Ticker/${key}/seen`, null)).body;
  await eventually(async () => (await seen('all')).length >= 3, { timeout_ms: 15_000 });
  const first = (await seen('all'))[0];
  t.same({ schedule: first.schedule, n: first.n }, { schedule: 'every-all', n: 7 }, 'the handler sees the schedule header and the input');

  const [row] = await query(keel, `SELECT name, target, every_ms, catchup, last_outcome, fired FROM sys_schedule WHERE name = 'every-all'`);
  t.same({ ...row, fired: Number(row.fired) >= 3 }, { name: 'every-all', target: 'Ticker/all/tick', every_ms: row.every_ms, catchup: 'all', last_outcome: 'succeeded', fired: true });
  t.equal(Number(row.every_ms), 1000);

  // Down for ~4 s (SIGKILL, then a start later): firings fall due while nothing runs.
  await keel.kill('SIGKILL');
  const downAt = Date.now();
  await new Promise((r) => setTimeout(r, 4000));
  await keel.launch();
  const upAt = Date.now();
  await eventually(async () => (await seen('all')).some((s) => Date.parse(s.at) > upAt + 1500), { timeout_ms: 20_000 });

  const times = (list) => list.map((s) => Date.parse(s.at));
  // A firing of the downtime runs seconds after its time; one on time, within a fraction of one.
  const caughtUp = (list) => list.filter((s) => s.ran - Date.parse(s.at) > 2000).length;
  const allSeen = await seen('all');
  const all = times(allSeen);
  t.equal(new Set(all).size, all.length, 'all: no firing twice');
  const gaps = all.slice(1).map((at, i) => at - all[i]);
  t.ok(gaps.every((g) => g === 1000), `all: every second from the first to the last, the downtime's too (gaps ${JSON.stringify(gaps)})`);
  t.ok(caughtUp(allSeen) >= 2, `all: the firings of the downtime ran late, after the start (${caughtUp(allSeen)})`);

  const skipSeen = await seen('skip');
  t.equal(new Set(times(skipSeen)).size, skipSeen.length, 'skip: no firing twice');
  t.equal(caughtUp(skipSeen), 0, 'skip: nothing of the downtime ran');
  const skipView = (await adminCall(keel, 'GET', '/schedules/every-skip')).json;
  t.ok(skipView.skipped >= 2, `skip: the missed firings counted (${skipView.skipped})`);

  const oneSeen = await seen('one');
  t.equal(new Set(times(oneSeen)).size, oneSeen.length, 'one: no firing twice');
  t.equal(caughtUp(oneSeen), 1, 'one: one firing for the whole downtime');
  const oneAt = Date.parse(oneSeen.find((s) => s.ran - Date.parse(s.at) > 2000).at);
  t.ok(oneAt > downAt - 1000 && oneAt <= downAt + 1000, 'the first missed one: its time is when the downtime began');
  const oneView = (await adminCall(keel, 'GET', '/schedules/every-one')).json;
  t.ok(oneView.skipped >= 1 && oneView.skipped < skipView.skipped + 2, `one: the others counted as skipped (${oneView.skipped})`);

  // Pause, trigger, resume, delete.
  const paused = await adminCall(keel, 'POST', '/schedules/every-skip/pause');
  t.equal(paused.status, 200);
  t.same({ paused: paused.json.paused, next: paused.json.next_fire_at }, { paused: true, next: null });
  const before = (await seen('skip')).length;
  const triggered = await adminCall(keel, 'POST', '/schedules/every-skip/trigger');
  t.equal(triggered.status, 200);
  await eventually(async () => (await seen('skip')).length === before + 1, { timeout_ms: 10_000 });
  await new Promise((r) => setTimeout(r, 2500));
  t.equal((await seen('skip')).length, before + 1, 'paused: only the trigger ran');
  t.ok((await adminCall(keel, 'POST', '/schedules/every-skip/resume')).json.next_fire_at, 'resumed: a next firing');
  const list = await adminCall(keel, 'GET', '/schedules');
  t.same(list.json.schedules.map((s) => s.name), ['every-all', 'every-one', 'every-skip']);
  for (const name of ['every-all', 'every-one', 'every-skip']) t.equal((await adminCall(keel, 'DELETE', `/schedules/${name}`)).status, 200);
  t.same((await adminCall(keel, 'GET', '/schedules')).json.schedules, [], 'deleted');
  const settled = (await seen('all')).length;
  await new Promise((r) => setTimeout(r, 2000));
  t.equal((await seen('all')).length, settled, 'a deleted schedule fires no more');
  t.match(keel.output, /"schedule":"every-all".*schedule created/);
});

t.test('config: [[schedules]] of a bad shape are refused with RT0002 naming the line', async (t) => {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const path = await import('node:path');
  const { loadConfig } = await import('../dist/config/index.js');
  const dir = mkdtempSync(path.join(tmpdir(), 'keel-sched-conf-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const load = (text) => {
    const file = path.join(dir, 'c.toml');
    writeFileSync(file, text);
    return loadConfig(file, {});
  };
  const good = load('[[schedules]]\nname = "a"\ntarget = "Ticker/k/tick"\nevery = "1m"\ninput = { n = 3 }\n');
  t.same(good.schedules, [{ name: 'a', body: { target: 'Ticker/k/tick', every: '1m', input: { n: 3 } } }], 'TOML integers become JSON numbers');
  t.throws(() => load('[[schedules]]\nname = "a"\nevry = "1m"\n'), { code: 'RT0002', message: /c\.toml:3: key 'schedules\[0\]\.evry': unknown key/ });
  t.throws(() => load('[[schedules]]\nname = "a"\n[[schedules]]\nname = "a"\n'), { code: 'RT0002', message: /'a' is declared twice/ });
  t.throws(() => load('[[schedules]]\nname = "a b"\n'), { code: 'RT0002', message: /schedules\[0\]\.name/ });
  t.same(loadConfig(undefined, {}).schedules, [], 'none by default');
});

t.test('server: schedules of config.toml wait for their service, fire, and go when the configuration drops them', async (t) => {
  const { writeFileSync } = await import('node:fs');
  const path = await import('node:path');
  const { tempDir } = await import('./helpers/keel.mjs');
  const file = path.join(tempDir(t), 'config.toml');
  writeFileSync(file, '[[schedules]]\nname = "from-config"\ntarget = "Ticker/conf/tick"\nevery = "1s"\ninput = { n = 3 }\n');
  const keel = await startKeel(t, { args: ['--config', file] });
  await eventually(async () => /the schedule 'from-config' of the configuration is not applied: the target service 'Ticker' is not registered/.test(keel.output));
  t.equal((await adminCall(keel, 'GET', '/schedules')).json.schedules.length, 0, 'not yet: its service is not registered');
  await register(keel, await serveServices(t, [Ticker]));
  const seen = await eventually(async () => {
    const list = (await ingress(keel, '/Ticker/conf/seen', null)).body;
    return list.length >= 2 ? list : undefined;
  }, { timeout_ms: 15_000 });
  t.same({ schedule: seen[0].schedule, n: seen[0].n }, { schedule: 'from-config', n: 3 }, 'set once the service registered, and fires');
  t.equal((await adminCall(keel, 'GET', '/schedules/from-config')).json.managed_by, 'config');

  writeFileSync(file, '# no schedules any more\n');
  await keel.restart();
  await eventually(async () => (await adminCall(keel, 'GET', '/schedules')).json.schedules.length === 0);
  t.match(keel.output, /"schedule":"from-config".*the configuration no longer declares it/, 'deleted at the start without it, and said so');
});
