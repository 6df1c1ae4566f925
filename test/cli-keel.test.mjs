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

// ---------------------------------------------------------------------------------------------
// The pieces of the CLI that need no server: mismatch analysis, SQL building, state version.

const { analyseMismatch, normaliseEntryName, renderMismatch } = await import('../dist/cli/journal.js');
const { filterConditions, lit } = await import('../dist/cli/sql.js');
const { stateVersion: cliStateVersion, decodeValue } = await import('../dist/cli/commands/state.js');
const { stateVersion: serverStateVersion } = await import('../dist/admin/introspection.js');
const { colorsFor } = await import('../dist/cli/output.js');

const journal = [
  { index: 0, entry_type: 'Command: Input' },
  { index: 1, entry_type: 'Command: Run', name: 'a', completed: true },
  { index: 2, entry_type: 'Notification: Run' },
  { index: 3, entry_type: 'Command: Call', invoked_target: 'Other/h' },
];
const MISMATCH = 'Found a mismatch between the code paths taken during the previous execution and the paths taken during this execution.\nThis typically happens when some parts of the code are non-deterministic.\n';

t.test('RT0016: a type mismatch whose SDK labels are swapped (TypeScript SDK 1.17)', async (t) => {
  const m = analyseMismatch(
    {
      last_failure_error_code: 'RT0016',
      last_failure: `[RT0016] ${MISMATCH} - The previous execution ran and recorded the following: 'sleep' (index '1')\n - The current execution attempts to perform the following: 'run'`,
      last_failure_related_entry_index: 1,
      last_failure_related_entry_type: 'Command: Sleep',
    },
    journal,
  );
  t.match(m, { kind: 'type', command_index: 1, journal_index: 1, labels_swapped: true, recorded: { entry_type: 'Command: Run', name: 'a', label: 'run' }, new: { entry_type: 'Command: Sleep', label: 'sleep' } });
  const text = renderMismatch(m, colorsFor({ isTTY: false }));
  t.match(text, /entry\s+Command: Run\s+Command: Sleep/);
  t.match(text, /the SDK's message calls 'sleep' recorded/);
});

t.test('RT0016: a type mismatch with the labels the right way round, command index past a notification', async (t) => {
  const m = analyseMismatch(
    {
      last_failure: `[RT0016] ${MISMATCH} - The previous execution ran and recorded the following: 'call' (index '2')\n - The current execution attempts to perform the following: 'handler return'`,
      last_failure_related_entry_index: 2,
    },
    journal,
  );
  t.match(m, { kind: 'type', command_index: 2, journal_index: 3, labels_swapped: false, recorded: { entry_type: 'Command: Call', label: 'call' }, new: { label: 'handler return' } });
  t.equal(normaliseEntryName('handler return'), normaliseEntryName('Command: Output'));
  t.equal(normaliseEntryName('get state'), normaliseEntryName('Command: GetLazyState'));
});

t.test('RT0016: a content mismatch lists the fields, recorded != new', async (t) => {
  const m = analyseMismatch(
    {
      last_failure_error_code: 'RT0016',
      last_failure: `[RT0016] ${MISMATCH}- The mismatch happened while executing 'call' (index '2')\n- Difference:\n   service_name: Other != Another\n   handler_name: h != h2`,
      last_failure_related_entry_index: 2,
      last_failure_related_entry_type: 'Command: Call',
    },
    journal,
  );
  t.match(m, { kind: 'content', journal_index: 3, recorded: { entry_type: 'Command: Call' }, new: { entry_type: 'Command: Call' } });
  t.same(m.differences, [
    { field: 'service_name', recorded: 'Other', new: 'Another' },
    { field: 'handler_name', recorded: 'h', new: 'h2' },
  ]);
  t.match(renderMismatch(m, colorsFor({ isTTY: false })), /service_name\s+Other\s+Another/);
});

t.test('RT0016: an await that cannot be replayed lists what it awaited', async (t) => {
  const m = analyseMismatch(
    { last_failure_error_code: 'RT0016', last_failure: `[RT0016] Found a mismatch between the code paths taken during the previous execution and the paths taken during this execution.\n'await' could not be replayed. This usually means the code was mutated adding an 'await' without registering a new service revision.\nNotifications awaited on this await point:\n - completion id 3\n - sleep [2]` },
    journal,
  );
  t.match(m, { kind: 'await', notes: ['completion id 3', 'sleep [2]'] });
  t.equal(analyseMismatch({ last_failure_error_code: 'RT0007', last_failure: '[RT0007] boom' }, journal), undefined, 'other failures: none');
});

t.test('filters become plain SQL', async (t) => {
  const now = Date.parse('2026-01-02T00:00:00.000Z');
  t.equal(lit("o'hara"), "'o''hara'");
  t.same(
    filterConditions({ service: ['A', "B'"], handler: ['h'], key: ['k'], status: ['running', 'paused'], olderThan: '1h', newerThan: '1d', failureCode: ['rt0016', '500'], deployment: ['dp_1'] }, now),
    [
      "target_service_name IN ('A', 'B''')",
      "target_handler_name = 'h'",
      "target_service_key = 'k'",
      "status IN ('running', 'paused')",
      "created_at <= '2026-01-01T23:00:00.000Z'",
      "created_at >= '2026-01-01T00:00:00.000Z'",
      "(last_failure_error_code = 'RT0016' OR completion_failure LIKE '[500]%')",
      "(pinned_deployment_id = 'dp_1' OR last_attempt_deployment_id = 'dp_1')",
    ],
  );
  t.throws(() => filterConditions({ status: ['nope'] }), { exitCode: 2 });
  t.throws(() => filterConditions({ olderThan: 'soon' }), { exitCode: 2 });
  t.throws(() => filterConditions({ failureCode: ['x-y'] }), { exitCode: 2 });
});

t.test('state: the version the CLI sends is the one the server computes; values decode', async (t) => {
  const entries = new Map([['count', Buffer.from('5')], ['a', Buffer.from('"x"')], ['bin', Buffer.from([0xff, 0x00])]]);
  t.equal(cliStateVersion(entries), serverStateVersion([...entries]));
  t.equal(cliStateVersion(new Map()), serverStateVersion([]));
  t.same(decodeValue(Buffer.from('{"a":1}')).value, { a: 1 });
  t.same(decodeValue(Buffer.from('plain')).value, 'plain');
  t.same(decodeValue(Buffer.from([0xff, 0x00])), { value: { hex: 'ff00' }, text: '0xff00' });
});
