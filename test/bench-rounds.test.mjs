// The benchmark's rounds (bench/rounds.mjs): a cell measured several times reports the median of
// each figure, sums the errors, and is an error when any round could not run.
import t from 'tap';
import { median } from '../bench/common.mjs';
import { combineBurst, combineRows, orderOf } from '../bench/rounds.mjs';

const row = (round, rps, p99, cpu, extra = {}) => ({
  target: 'keel',
  round,
  scenario: 'noop',
  concurrency: 32,
  ok: rps * 6,
  errors: 0,
  errorKinds: {},
  rps,
  latencyMs: { p50: p99 / 4, p99 },
  cpuMsPerInvocation: { server: cpu, service: cpu / 2 },
  ...extra,
});

t.test('median', async (t) => {
  t.equal(median([3, 1, 2]), 2);
  t.equal(median([4, 1, 3, 2]), 2.5);
  t.equal(median([null, 5, undefined]), 5);
  t.equal(median([]), null);
});

t.test('targets in turn: forward, backward, forward', async (t) => {
  t.same(orderOf(['restate', 'keel'], 1), ['restate', 'keel']);
  t.same(orderOf(['restate', 'keel'], 2), ['keel', 'restate']);
  t.same(orderOf(['restate', 'keel'], 3), ['restate', 'keel']);
});

t.test('a cell of three rounds: each figure its own median, errors summed', async (t) => {
  const c = combineRows([
    row(1, 1000, 90, 0.5),
    row(2, 1400, 40, 0.3, { errors: 2, errorKinds: { timeout: 2 } }),
    row(3, 1200, 60, 0.7),
  ]);
  t.equal(c.rps, 1200);
  t.equal(c.latencyMs.p99, 60);
  t.equal(c.latencyMs.p50, 15);
  t.equal(c.cpuMsPerInvocation.server, 0.5, 'the median CPU, not the median round\'s');
  t.equal(c.errors, 2);
  t.same(c.errorKinds, { timeout: 2 });
  t.equal(c.ok, (1000 + 1400 + 1200) * 6);
  t.same(c.rounds.map((r) => r.rps), [1000, 1400, 1200]);
  t.equal(c.round, undefined);
});

t.test('object counts must be right in every round; a round that did not run fails the cell', async (t) => {
  const ok = { pass: true, matching: 1 };
  const c = combineRows([row(1, 100, 9, 1, { check: ok }), row(2, 100, 9, 1, { check: { pass: false, matching: 0 } }), row(3, 100, 9, 1, { check: ok })]);
  t.equal(c.check.pass, false);
  const failed = combineRows([row(1, 100, 9, 1), { target: 'keel', round: 2, scenario: 'noop', concurrency: 32, error: 'server exited' }]);
  t.match(failed.error, /round 2: server exited/);
  t.equal(failed.ok, undefined);
});

t.test('the Greeter burst: the median wall time, errors of every round', async (t) => {
  const b = combineBurst([
    { round: 1, ok: 2000, errors: 0, wallMs: 6100, latencyMs: { p99: 1900 } },
    { round: 2, ok: 1999, errors: 1, wallMs: 5800, latencyMs: { p99: 1800 } },
    { round: 3, ok: 2000, errors: 0, wallMs: 5900, latencyMs: { p99: 1850 } },
  ]);
  t.equal(b.wallMs, 5900);
  t.equal(b.errors, 1);
  t.same(b.rounds.map((r) => r.wallMs), [6100, 5800, 5900]);
});

t.test('retained state: filled ÷ empty is the median of the rounds\' ratios, not a ratio of medians', async (t) => {
  const { pairedRatios } = await import('../bench/retained.mjs');
  const { filledRatio } = await import('../bench/report.mjs');
  // The machine was slow in round 2 for both servers: each column's median comes from another
  // round than the other's (1,300 ÷ 1,500 = 0.87), while the rounds' ratios say 1.00, 0.91, 0.87.
  const filled = { noop: { rps: 1300, roundsRps: [1700, 1000, 1300] }, object: { rps: 900 } };
  const empty = { noop: { rps: 1500, roundsRps: [1700, 1100, 1500] }, object: { rps: 1000 } };
  const ratios = pairedRatios(filled, empty);
  t.same(ratios.noop.map((v) => v.toFixed(3)), ['1.000', '0.909', '0.867']);
  t.same(ratios.object, [0.9], 'a single round: its one ratio');
  t.equal(filledRatio({ filled, emptyPaired: empty, pairedRatios: ratios }, 'noop').ratio.toFixed(3), '0.909');
  t.equal(filledRatio({ filled, emptyPaired: empty }, 'noop').ratio.toFixed(3), (1300 / 1500).toFixed(3), 'an older results file: the medians divided');
});
