// The Shuffle delivers a partition's outbox in sequence order, exactly once as the targets see it
// (each drops what is at or below the last sequence it applied from the source), with a bounded
// number in flight, from the store when it is behind and from the fold's announcements when not.
import t from 'tap';
import { Shuffle, OUTBOX_IN_FLIGHT_LIMIT } from '../dist/partition/shuffle.js';

const logger = { warn() {}, info() {}, error() {}, debug() {} };
const tick = () => new Promise((r) => setImmediate(r));

/**
 * A source partition's stored outbox and two targets that dedupe by source sequence, as the
 * fold does. `refuse(entry)` returns an Error to refuse synchronously, 'later' to accept and then
 * reject (a target that stops), or nothing to deliver.
 */
function world({ refuse = () => undefined, hold = false } = {}) {
  const store = new Map();
  const applied = { A: [], B: [] };
  const last = { A: 0, B: 0 };
  const held = [];
  let reads = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  const host = {
    async read(from, limit) {
      reads++;
      await tick();
      return [...store.keys()].filter((s) => s >= from).sort((a, b) => a - b).slice(0, limit).map((s) => store.get(s));
    },
    send(e) {
      const r = refuse(e);
      if (r instanceof Error) return r;
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      const deliver = () => {
        inFlight--;
        if (r === 'later') throw new Error('the target stopped (test)');
        if (e.seq > last[e.target]) {
          last[e.target] = e.seq;
          applied[e.target].push(e.seq);
        }
        store.delete(e.seq);
      };
      return hold ? new Promise((res) => held.push(res)).then(deliver) : tick().then(deliver);
    },
  };
  let seq = 0;
  const add = (target) => {
    const e = { seq: ++seq, target, command: Buffer.alloc(0) };
    store.set(e.seq, e);
    return e;
  };
  return { store, applied, host, add, held, reads: () => reads, maxInFlight: () => maxInFlight };
}

/** Starts the shuffle on an empty store and waits until its first read found nothing: it is live. */
async function startedLive(s, w) {
  s.start();
  await until(() => w.reads() > 0, 'the first read');
  await tick();
  await tick();
}

async function until(cond, what) {
  const deadline = Date.now() + 5000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

t.test('a backlog is read from the store, then announcements are sent without reading', async (t) => {
  const w = world();
  for (let i = 0; i < 1000; i++) w.add(i % 2 ? 'A' : 'B');
  const s = new Shuffle(0, w.host, logger);
  t.teardown(() => s.stop());
  s.start();
  await until(() => w.store.size === 0, 'the backlog delivered');
  const readsAfterBacklog = w.reads();
  await tick();
  for (let i = 0; i < 50; i++) s.announce(w.add('A'));
  await until(() => w.store.size === 0, 'the announced delivered');
  t.equal(w.reads(), readsAfterBacklog, 'no store read for entries announced while live');
  t.same(w.applied.B, [...Array(500)].map((_, i) => 2 * i + 1));
  t.same(w.applied.A, [...[...Array(500)].map((_, i) => 2 * i + 2), ...[...Array(50)].map((_, i) => 1001 + i)]);
});

t.test('a refused entry stops everything after it; the retry sends it and the rest in order, none lost', async (t) => {
  let refusals = 1;
  const w = world({ refuse: (e) => (e.seq === 3 && refusals-- > 0 ? new Error('KEEL0501 overloaded (test)') : undefined) });
  const s = new Shuffle(0, w.host, logger);
  t.teardown(() => s.stop());
  await startedLive(s, w);
  // 1..6 alternate targets: B gets 1, 3, 5, A gets 2, 4, 6; 3 is refused once.
  for (let i = 0; i < 6; i++) s.announce(w.add(i % 2 ? 'A' : 'B'));
  await until(() => w.store.size === 0, 'all delivered after the retry');
  t.same(w.applied.B, [1, 3, 5], 'B got every entry, in order: 5 did not overtake the refused 3');
  t.same(w.applied.A, [2, 4, 6]);
});

t.test('entries rejected after they were taken (the target stopped, then came back) are sent again, in order', async (t) => {
  // A target whose write fails rejects what it had queued and everything after, until it is
  // back (after a restart): it never applies an entry after one it rejected.
  let target = 'up';
  const w = world({
    refuse: (e) => {
      if (target === 'up' && e.seq === 2) target = 'down';
      return target === 'down' ? 'later' : undefined;
    },
  });
  for (let i = 0; i < 4; i++) w.add('A');
  const s = new Shuffle(0, w.host, logger);
  t.teardown(() => s.stop());
  s.start();
  await until(() => target === 'down', 'the target went down');
  await new Promise((r) => setTimeout(r, 50));
  t.same(w.applied.A, [1], 'nothing after the rejected entry applied');
  target = 'back';
  await until(() => w.store.size === 0, 'all delivered');
  t.same(w.applied.A, [1, 2, 3, 4]);
});

t.test('at most OUTBOX_IN_FLIGHT_LIMIT entries are in flight; the rest wait in the store', async (t) => {
  const w = world({ hold: true });
  const s = new Shuffle(0, w.host, logger);
  t.teardown(() => s.stop());
  await startedLive(s, w);
  const n = OUTBOX_IN_FLIGHT_LIMIT * 3;
  for (let i = 0; i < n; i++) s.announce(w.add('A'));
  await tick();
  t.equal(w.held.length, OUTBOX_IN_FLIGHT_LIMIT, 'held at the limit');
  while (w.store.size > 0) {
    const batch = w.held.splice(0);
    for (const r of batch) r();
    await until(() => w.held.length > 0 || w.store.size === 0, 'more sent');
  }
  t.ok(w.maxInFlight() <= OUTBOX_IN_FLIGHT_LIMIT, `never more than the limit (${w.maxInFlight()})`);
  t.same(w.applied.A, [...Array(n)].map((_, i) => i + 1), 'all, in order');
});
