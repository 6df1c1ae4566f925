// Property test of flow control in the fold: random sequences of rule books (concurrency, rates,
// backlogs), FlowQueue pauses, scoped invokes with limit keys and priorities, attempt ends
// (completion, suspension, retry, pause), signals, operator actions, FLOW and other timers fired
// late or twice, older time stamps, and reloads from a real store in the middle. After every fold:
// slots held = scoped invocations that run or back off, per counter; every waiter in its queue, in
// priority-then-arrival order; no queue head with room left waiting; every head waiting only for its
// rate has a FLOW timer by then; timers counted right; and a rebuild from the log gives the same
// store bytes (the determinism replicas rely on).
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { invoke, ended, append, output, MessageType, Outcome, Then, TimerKind, ManageAction, InvocationId } from './helpers/fold.mjs';
import { scopePartitionKey } from '../dist/common/ids.js';
import { counterKeys } from '../dist/common/limit-rules.js';
import { fold } from '../dist/partition/fold/index.js';
import { PartitionState } from '../dist/partition/state.js';
import { loadState } from '../dist/partition/recovery.js';
import { openWorkerStore } from '../dist/storage/store.js';
import { timersTable } from '../dist/storage/tables/timers.js';

/** Runs `RUNS` random sequences of `STEPS` commands from `seed`; returns the failures by kind, and the most FLOW timers seen at once. */
async function fuzz(seed, { RUNS, STEPS, RELOAD = true, SKEW = false, LAG = 0.3 }) {
  const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const scopes = ['s', 't', 'u'], lks = [undefined, 'a', 'b', 'a/x', 'a/y'];
  const P = 1, TP = `p${P}/s/timer/`;
  const mk = () => { const store = new Map(); const o = { store, state: new PartitionState(P, undefined, { idle_statuses: 3 }),
    apply(cmd, at) { const actions = []; fold({ state: o.state, actions, now_ms: at }, { timestamp_ms: at, ...cmd }); for (const [k, v] of o.state.takeWrites()) v === null ? store.delete(k) : store.set(k, v); return actions; },
    status: (id) => o.state.status(id.text ?? id) }; o.state.loader = (k) => store.get(k); return o; };
  const timersOf = (p) => [...p.store.keys()].filter((k) => k.startsWith(TP)).sort().map((k) => timersTable.parse(P, k));
  let failures = 0, maxFlowTimers = 0; const fails = {};
  const fail = (tag, ...m) => { fails[tag] = (fails[tag] ?? 0) + 1; if (fails[tag] <= 3) t.comment(tag, ...m); failures++; };
  for (let run = 0; run < RUNS; run++) {
    const p = mk(); let now = 1_000_000; const ids = []; let ver = 0; const cmds = [];
    const A = (c, at = now) => { cmds.push([c, at]); return p.apply(c, at); };
    let broke = false;
    for (let step = 0; step < STEPS && !broke; step++) {
      if (RELOAD && step % 50 === 49) { const dir = mkdtempSync(path.join(os.tmpdir(), 'fz3-')); const db = await openWorkerStore(dir); await db.batch([...p.store].map(([key, value]) => ({ type: 'put', key, value }))); const st = await loadState(db, P); await db.close(); rmSync(dir, { recursive: true, force: true }); st.loader = (k) => p.store.get(k); p.state = st; }
      const r = rnd(); let at = now;
      try {
        if (r < 0.06) {
          ver++; const list = [];
          for (const pat of ['s', 't', 'u', 's/*', 's/a', 's/a/*', 't/*', '*', '*/*']) if (rnd() < 0.35) {
            const rate = rnd() < 0.5; list.push({ pattern: pat, concurrency: rnd() < 0.2 ? 0 : 1 + Math.floor(rnd() * 3), disabled: rnd() < 0.1, version: ver,
              ...(rate ? { rate_starts: 1 + Math.floor(rnd() * 3), rate_interval_ms: 1 + Math.floor(rnd() * 40) } : {}), ...(rnd() < 0.2 ? { backlog: Math.floor(rnd() * 4) } : {}) }); }
          A({ kind: 'limit_rules', limit_rules: { version: ver, rules: list } });
        } else if (r < 0.10) {
          A({ kind: 'flow_queue', flow_queue: { scope: pick(scopes), limit_key: pick(lks) ?? '', paused: rnd() < 0.5 } });
        } else if (r < 0.28) {
          now += Math.floor(rnd() * 25);
          for (const t of timersOf(p)) if (t.wake_up_ms <= now && (t.kind === TimerKind.FLOW ? rnd() > LAG : rnd() < 0.5)) {
            A({ kind: 'timer_fired', timer_fired: { invocation_id: InvocationId.parse(t.id).bytes, completion_id: t.completion_id, wake_up_ms: t.wake_up_ms, kind: t.kind } });
            if (rnd() < 0.1) A({ kind: 'timer_fired', timer_fired: { invocation_id: InvocationId.parse(t.id).bytes, completion_id: t.completion_id, wake_up_ms: t.wake_up_ms, kind: t.kind } });
          }
        } else if (r < 0.50) {
          const sc = pick(scopes); const id = InvocationId.random(scopePartitionKey(sc)); ids.push(id);
          const lk = pick(lks); const prio = rnd() < 0.4 ? Math.floor(rnd() * 10) : 0;
          if (SKEW && rnd() < 0.2) at = now - Math.floor(rnd() * 20); // an older stamp (another leader's clock)
          p.state.flow.now_ms = at; const ahead = p.state.flow.next(sc);
          const acts = A(invoke(id, { scope: sc, ...(lk ? { limit_key: lk } : {}), ...(prio ? { priority: prio } : {}), ...(rnd() < 0.1 ? { execute_at_ms: now + 5 } : {}) }), at);
          if (ahead && ahead.entry.priority >= prio && p.status(ahead.entry.id).status === 'inboxed' && acts.some((a) => a.kind === 'start' && a.id === id.text)) fail('BYPASS', run, step, sc, lk ?? '', 'prio', prio, 'ahead', JSON.stringify(ahead));
        } else if (ids.length) {
          const id = pick(ids); const s = p.status(id);
          if (s.status === 'completed') continue;
          const k = rnd();
          if (s.status === 'running') {
            if (k < 0.35) { A(append(id, s.epoch, MessageType.OutputCommand, output(1))); A(ended(id, s.epoch, Outcome.END)); }
            else if (k < 0.55) A(ended(id, s.epoch, Outcome.SUSPENDED, { waiting_signals: [17] }));
            else if (k < 0.7) A(ended(id, s.epoch, Outcome.FAILED, { then: Then.RETRY, retry_at_ms: now + 3 }));
            else if (k < 0.8) A(ended(id, s.epoch, Outcome.FAILED, { then: Then.PAUSE }));
            else A({ kind: 'manage', manage: { invocation_id: id.bytes, action: pick([ManageAction.KILL, ManageAction.PAUSE, ManageAction.CANCEL]) } });
          } else if (s.status === 'suspended') {
            A(k < 0.6 ? { kind: 'signal', signal: { invocation_id: id.bytes, idx: 17, void: true } } : { kind: 'manage', manage: { invocation_id: id.bytes, action: pick([ManageAction.KILL, ManageAction.PAUSE, ManageAction.CANCEL, ManageAction.RESUME]) } });
          } else if (s.status === 'backing-off') {
            A(k < 0.6 ? { kind: 'retry_attempt', retry_attempt: { invocation_id: id.bytes, epoch: s.epoch } } : { kind: 'manage', manage: { invocation_id: id.bytes, action: pick([ManageAction.KILL, ManageAction.PAUSE, ManageAction.RESUME]) } });
          } else if (s.status === 'scheduled') {
            if (k > 0.7) A({ kind: 'manage', manage: { invocation_id: id.bytes, action: ManageAction.CANCEL } });
          } else {
            A({ kind: 'manage', manage: { invocation_id: id.bytes, action: pick([ManageAction.KILL, ManageAction.PAUSE, ManageAction.CANCEL, ManageAction.RESUME]) } });
            if (k < 0.3) A({ kind: 'signal', signal: { invocation_id: id.bytes, idx: 17, void: true } });
          }
        }
      } catch (e) { fail('THROW', run, step, e.stack.split('\n').slice(0, 3).join(' | ')); broke = true; break; }
      // invariants (after a fold: flow.now_ms is the last command's time)
      const flow = p.state.flow, tnow = flow.now_ms;
      const usage = {};
      for (const id of ids) { const s = p.status(id); if (s.status === 'running' || s.status === 'backing-off') for (const k of counterKeys(s.scope, s.limit_key)) usage[k] = (usage[k] ?? 0) + 1;
        if (s.status === 'inboxed' && s.flow_seq !== undefined) { const q = flow.queues.get(s.scope)?.get(s.limit_key ?? ''); if (!q || !q.some((e) => e.id === s.id && e.seq === s.flow_seq && e.priority === (s.priority ?? 0))) fail('ORPHAN', run, step, s.id); }
        if (s.status === 'inboxed' && s.flow_seq === undefined) fail('INBOXED-NO-SEQ', run, step);
        if (s.flow_seq !== undefined && s.status !== 'inboxed') fail('SEQ-ON', run, step, s.status); }
      const su = JSON.stringify(Object.fromEntries(Object.entries(usage).sort())), pu = JSON.stringify(Object.fromEntries(Object.entries(p.state.counters.usage).sort()));
      if (su !== pu) { fail('USAGE', run, step, su, pu); broke = true; }
      const ts = timersOf(p); const flowTimers = ts.filter((t) => t.kind === TimerKind.FLOW);
      maxFlowTimers = Math.max(maxFlowTimers, flowTimers.length);
      if (ts.length !== p.state.counters.timers) fail('TIMER-COUNT', run, step, ts.length, p.state.counters.timers);
      for (const [sc, byKey] of flow.queues) {
        if (flow.next(sc) !== undefined && !flowTimers.some((t) => t.wake_up_ms <= tnow)) fail('STUCK-ROOM', run, step, sc, JSON.stringify(flow.next(sc)));
        for (const [lk, q] of byKey) {
          // queue order: priority desc, then seq
          for (let i = 1; i < q.length; i++) if (q[i - 1].priority < q[i].priority || (q[i - 1].priority === q[i].priority && q[i - 1].seq > q[i].seq)) fail('ORDER', run, step, sc, lk);
          if (q.length === 0 || flow.isPaused(sc, lk)) continue;
          const slot = counterKeys(sc, lk).every((k) => { const l = flow.rules.limitOf(k); return l === undefined || flow.usageOf(k) < l; });
          if (!slot) continue;
          const ready = flow.rateReadyAt(sc, lk);
          if (ready <= tnow) continue; // covered by STUCK-ROOM
          if (!flowTimers.some((t) => t.wake_up_ms <= Math.ceil(ready))) fail('NO-TIMER', run, step, sc, lk, 'ready', ready, 'now', tnow, 'flow_wake', p.state.counters.flow_wake_ms, JSON.stringify(flowTimers.map((t) => t.wake_up_ms)));
        }
      }
    }
    // rebuild from the log on a fresh partition
    const q = mk(); for (const [c, at] of cmds) q.apply(c, at);
    const keys = new Set([...p.store.keys(), ...q.store.keys()]);
    const diffs = []; for (const k of keys) { const x = p.store.get(k), y = q.store.get(k); if (!x || !y || Buffer.compare(Buffer.from(x), Buffer.from(y))) diffs.push(k); }
    if (diffs.length) fail('REBUILD', run, diffs.length, diffs.slice(0, 4).join(' '));
  }
  return { fails, maxFlowTimers };
}

const configs = [
  ['reloads from a store every 50 commands', 11, { RUNS: 30, STEPS: 150 }],
  ['older time stamps (another leader\'s clock)', 7, { RUNS: 30, STEPS: 150, SKEW: true }],
  // Timers left unfired past their time do not count as pending: the next wake-up sets another.
  ['FLOW timers mostly late', 23, { RUNS: 20, STEPS: 150, LAG: 0.8, maxTimers: 10 }],
  ['no reloads, long runs', 5, { RUNS: 10, STEPS: 400, RELOAD: false }],
];
for (const [name, seed, opts] of configs) {
  t.test(`flow control fuzz: ${name} (seed ${seed})`, async (t) => {
    const { fails, maxFlowTimers } = await fuzz(seed, opts);
    t.same(fails, {}, 'no invariant broken, and the rebuild matches');
    t.ok(maxFlowTimers <= (opts.maxTimers ?? 4), `FLOW timers pending at once stay few (${maxFlowTimers})`);
  });
}
