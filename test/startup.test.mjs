// The server's start: the bundle is compiled through V8's code cache, written beside it after a
// first start and read by the next ones (see src/main.ts).
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startKeel, eventually } from './helpers/keel.mjs';

const bundleDir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle');
const caches = () => fs.readdirSync(bundleDir).filter((f) => f.startsWith(`keel.cjs.${process.version}.`) && f.endsWith('.v8cache'));
const readyLine = (keel) => keel.output.split('\n').filter((l) => l.includes('"keel is ready"')).map((l) => JSON.parse(l)).at(-1);

t.test('a start writes the code cache; the next start reads it', async (t) => {
  const keel = await startKeel(t);
  const first = readyLine(keel);
  t.ok(first.startup_ms > 0 && first.startup_cpu_ms > 0, `the ready line says how long the start took (${first.startup_ms} ms, ${first.startup_cpu_ms} ms CPU)`);
  t.match(first.code_cache, /^(none|used|rejected)$/);
  const written = await eventually(() => caches().length === 1 && caches()[0], { timeout_ms: 20_000 });
  t.ok(fs.statSync(path.join(bundleDir, written)).size > 100_000, `cache ${written} written`);
  await keel.stop();
  await keel.launch();
  t.equal(readyLine(keel).code_cache, 'used', 'the second start read the cache');
  const res = await fetch(`${keel.admin}/health`);
  t.equal(res.status, 200, 'and serves');
});
