// Storage codes against a real Keel process. RT0009: a non-empty worker storage directory without
// a format version file makes the server refuse to start with the code and the way out, without
// touching the directory; once it is wiped (or another path is set) the server starts and serves.
// (RT0005, META0010 and META0011 are covered in config.test.mjs and errors-meta.test.mjs.)
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, tempDir } from './helpers/keel.mjs';

async function startFails(t, opts) {
  const err = await startKeel(t, opts).then(
    () => undefined,
    (e) => e,
  );
  t.ok(err, 'Keel refused to start');
  t.match(err?.message ?? '', /exited early \(\{"code":1/, 'it exited with a non-zero code');
  return err?.message ?? '';
}

const hello = restate.service({ name: 'StorageHello', handlers: { hi: async (_ctx, name) => `hi ${name}` } });

t.test('RT0009: worker storage without a format version file', async (t) => {
  const dir = tempDir(t);
  const worker = path.join(dir, 'data', 'worker');
  fs.mkdirSync(worker, { recursive: true });
  fs.writeFileSync(path.join(worker, 'OLD-DATA'), 'written by a server below 0.8');

  const out = await startFails(t, { dir });
  t.match(out, /RT0009/);
  t.match(out, worker, 'names the directory');
  t.match(out, /wipe it or set another worker\.storage_db\.path/, 'says how to recover');
  t.same(fs.readdirSync(worker), ['OLD-DATA'], 'the directory was left as it was (no version file written)');

  // Same through worker.storage_db.path set explicitly.
  const other = path.join(dir, 'elsewhere');
  fs.mkdirSync(other);
  fs.writeFileSync(path.join(other, 'x'), 'x');
  const out2 = await startFails(t, { dir, env: { KEEL_WORKER__STORAGE_DB__PATH: other } });
  t.match(out2, /RT0009/);
  t.match(out2, other);

  // Remedy: set another path (the stray data stays where it is) -> the server starts and serves.
  const keel = await startKeel(t, { dir, env: { KEEL_WORKER__STORAGE_DB__PATH: path.join(dir, 'fresh-worker') } });
  await register(keel, await serveServices(t, [hello]));
  const r = await ingress(keel, '/StorageHello/hi', 'there');
  t.equal(r.status, 200);
  t.equal(r.body, 'hi there');
  t.ok(fs.existsSync(path.join(worker, 'OLD-DATA')));
  await keel.stop();

  // Remedy: wipe it -> the server starts on the default path.
  fs.rmSync(worker, { recursive: true });
  const keel2 = await startKeel(t, { dir });
  t.ok(fs.readdirSync(worker).includes('KEEL_STORAGE_VERSION'), 'a fresh directory gets its version file');
  t.equal(keel2.proc.exitCode, null);
});
