// `keel explain <CODE>`: the bin of package.json, spawned as a user runs it.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { catalogue } from '../dist/errors/index.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = path.join(root, JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).bin.keel);

function keel(...args) {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

t.test('the bin is dist/cli/keel.js with a node shebang', async (t) => {
  t.ok(fs.existsSync(bin));
  t.match(fs.readFileSync(bin, 'utf8').split('\n')[0], /^#!\/usr\/bin\/env node$/);
});

t.test('explain prints code, title, condition and remedy for every catalogue code', async (t) => {
  t.ok(catalogue.size >= 30);
  for (const e of catalogue.values()) {
    const r = keel('explain', e.code);
    t.equal(r.code, 0, e.code);
    t.ok(r.out.startsWith(`${e.code}: ${e.title}\n`), e.code);
    const flat = r.out.replace(/\s+/g, ' ');
    t.ok(flat.includes(`Condition: ${e.condition}`), `${e.code} condition`);
    t.ok(flat.includes(`Remedy: ${e.remedy}`), `${e.code} remedy`);
  }
});

t.test('explain is case-insensitive', async (t) => {
  const r = keel('explain', 'rt0001');
  t.equal(r.code, 0);
  t.match(r.out, /^RT0001: /);
});

t.test('an unknown code exits 2 with a message on stderr', async (t) => {
  for (const bad of ['RT9999', 'META0001', 'hello']) {
    const r = keel('explain', bad);
    t.equal(r.code, 2, bad);
    t.equal(r.out, '');
    t.match(r.err, new RegExp(`unknown error code '${bad}'`));
  }
});

t.test('usage errors exit 2', async (t) => {
  t.equal(keel().code, 2);
  t.equal(keel('explain').code, 2);
  t.equal(keel('frobnicate').code, 2);
  const list = keel('explain', '--list');
  t.equal(list.code, 0);
  t.equal(list.out.trim().split('\n').length, catalogue.size);
});
