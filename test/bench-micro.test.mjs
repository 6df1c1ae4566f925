// The fold-and-append micro-benchmark (bench/micro.mjs) against the built server: it drives the fold
// as the server does, and checks that every invocation it folds completes. It went on failing
// unseen ("500 of 500 invocations did not complete") once the fold read a suspended invocation's
// journal and timer back from the store, which the benchmark's stand-in store did not hold.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const KINDS = [
  'invoke',
  'journal_append Run',
  'journal_append RunCompletion',
  'journal_append Sleep',
  'attempt_ended SUSPENDED',
  'timer_fired (resumes)',
  'journal_append Output',
  'attempt_ended END',
  'invoke (object, 100 keys)',
  'journal_append GetEagerState',
  'journal_append SetState',
  'journal_append Output (object)',
  'attempt_ended END (object, next from inbox)',
];

t.test('bench/micro.mjs folds every lifecycle to completion and appends through a processor on disk', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-micro-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const out = join(dir, 'micro.json');
  const run = spawnSync(process.execPath, ['bench/micro.mjs', '--json', out, '--invocations', '600', '--duration', '0.2', '--batches', '1,16'], { encoding: 'utf8', timeout: 120_000 });
  t.equal(run.status, 0, `exit 0 (stderr: ${run.stderr.slice(-600)})`);
  const result = JSON.parse(readFileSync(out, 'utf8'));
  t.same(result.fold.map((r) => r.kind), KINDS, 'a row for each kind of command, in lifecycle order');
  for (const r of result.fold) {
    t.equal(r.n, 600, `${r.kind}: every invocation folded it`);
    t.ok(r.foldCpuUs > 0 && Number.isFinite(r.foldCpuUs), `${r.kind}: a fold time (${r.foldCpuUs.toFixed(2)} µs)`);
  }
  // A resumed invocation writes its timer's delete and its status: the store held what it read back.
  t.ok(result.fold.find((r) => r.kind === 'timer_fired (resumes)').storeWritesPerCmd >= 2, 'the timer that fired is deleted from the store');
  t.same(result.append.map((r) => [r.fsync, r.batch]), [[false, 1], [false, 16], [true, 1], [true, 16]], 'append rows for each fsync mode and batch');
  for (const r of result.append) t.ok(r.commands > 0 && r.storeWrites > 0, `append fsync=${r.fsync} batch=${r.batch}: ${r.commands} commands in ${r.storeWrites} writes`);
});
