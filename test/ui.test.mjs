// The admin UI at /ui, driven in a real browser (Debian's chromium through playwright-core)
// against a real Keel and real SDK services: register through the form after its dry run, watch
// invocations appear, open a journal, kill, bulk-cancel, see an RT0016 side by side, view and edit
// state, run SQL and export CSV, read the error catalogue. A screenshot of each page is kept in
// test/artifacts/ui/. Needs /usr/bin/chromium (`.ci/run` installs it) or KEEL_CHROMIUM.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';
import { launch, newPage } from './helpers/browser.mjs';
import { adminCall, eventually, ingress, query, serveServices, startKeel, tempDir } from './helpers/keel.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const ARTIFACTS = path.join(here, 'artifacts', 'ui');
fs.mkdirSync(ARTIFACTS, { recursive: true });

// ---- services ----------------------------------------------------------------------------------

const Counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => {
      const c = (await ctx.get('count')) ?? 0;
      ctx.set('count', c + n);
      return c + n;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('count')) ?? 0),
  },
});

const Flow = restate.service({
  name: 'Flow',
  handlers: {
    go: async (ctx, name) => {
      const greeting = await ctx.run('greet', () => `hello ${name}`);
      const n = await ctx.objectClient(Counter, 'flow').add(1);
      return `${greeting} #${n}`;
    },
    // Sleeps an hour: running, then suspended, until killed or cancelled.
    wait: async (ctx) => {
      await ctx.run('before', () => 'ready');
      await ctx.sleep(3_600_000);
      return 'woke';
    },
  },
});

// First attempt sets 'alpha' and fails; every later attempt sets 'beta': a journal mismatch.
let mismatchAttempts = 0;
const Drift = restate.object({
  name: 'Drift',
  handlers: {
    go: async (ctx) => {
      mismatchAttempts++;
      ctx.set(mismatchAttempts === 1 ? 'alpha' : 'beta', mismatchAttempts);
      if (mismatchAttempts === 1) throw new Error('first attempt fails');
      return 'ok';
    },
  },
});

// First attempt runs a step and fails; later attempts sleep where the journal has the step.
let swapAttempts = 0;
const Swap = restate.service({
  name: 'Swap',
  handlers: {
    go: async (ctx) => {
      swapAttempts++;
      if (swapAttempts === 1) {
        await ctx.run('step', () => 'done');
        throw new Error('first attempt fails');
      }
      await ctx.sleep(10);
      return 'ok';
    },
  },
});

const Signup = restate.workflow({
  name: 'Signup',
  handlers: {
    run: async (ctx) => {
      ctx.promise('email-confirmed').resolve('yes');
      return await ctx.promise('email-confirmed').get();
    },
  },
});

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

// ---- the run -----------------------------------------------------------------------------------

t.test('admin UI', async (t) => {
  const dir = tempDir(t);
  const config = path.join(dir, 'keel.toml');
  fs.writeFileSync(config, '[[ingress.kafka_clusters]]\nname = "local"\nbrokers = ["127.0.0.1:9092"]\n');
  const keel = await startKeel(t, {
    dir,
    args: ['--config', config],
    env: { KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms', KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '200ms' },
  });
  const uri = await serveServices(t, [Counter, Flow, Drift, Swap, Signup]);
  const browser = await launch(t);
  const { page, problems } = await newPage(browser, t);
  const ui = (p = '') => `${keel.admin}/ui${p}`;

  await t.test('serving: redirect, deep links, caching headers, partitions', async (t) => {
    const root = await fetch(`${keel.admin}/`, { redirect: 'manual' });
    t.equal(root.status, 302);
    t.equal(root.headers.get('location'), '/ui/');
    const index = await fetch(ui('/'));
    t.equal(index.status, 200);
    t.match(index.headers.get('content-type'), /text\/html/);
    t.equal(index.headers.get('cache-control'), 'no-cache');
    const html = await index.text();
    t.notMatch(html, /(?:src|href)="(?:https?:)?\/\//, 'index.html loads nothing from another origin');
    const etag = index.headers.get('etag');
    t.ok(etag, 'index.html has an ETag');
    // cache: 'no-cache' (max-age=0): by default fetch sends Cache-Control: no-cache with a conditional header, which forces a 200.
    const again = await fetch(ui('/'), { headers: { 'if-none-match': etag }, cache: 'no-cache' });
    t.equal(again.status, 304, 'revalidation of an unchanged index.html: 304');
    const deep = await fetch(ui('/invocations/inv_1dcwB4tQlhzX5e0v0pkD4VnH0rGE0Y3ReG'));
    t.equal(deep.status, 200, 'a deep link serves the app');
    t.equal(await deep.text(), html);
    const assets = [...html.matchAll(/(?:src|href)="(\/ui\/assets\/[^"]+)"/g)].map((m) => m[1]);
    t.ok(assets.length >= 2, `script and stylesheet: ${assets}`);
    for (const a of assets) {
      const r = await fetch(keel.admin + a);
      t.equal(r.status, 200, a);
      t.match(r.headers.get('cache-control'), /max-age=31536000.*immutable/, `${a} is cached as immutable`);
    }
    const missing = await fetch(ui('/assets/nope-123.js'));
    t.equal(missing.status, 404, 'a missing asset is a 404, not the app');
    const parts = await adminCall(keel, 'GET', '/partitions');
    t.equal(parts.status, 200);
    t.equal(parts.json.partitions.length, 8);
    t.ok(parts.json.partitions.every((p) => p.health === 'ok'), 'every partition is healthy');
    t.equal(parts.json.partitions[0].key_range.start, '0');
    t.equal(parts.json.partitions[7].key_range.end, String((1n << 64n) - 1n));
  });

  await t.test('overview before any deployment', async (t) => {
    await page.goto(`${keel.admin}/`);
    t.equal(new URL(page.url()).pathname, '/ui/', 'the root redirects to the UI');
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page.locator('#partitions tbody tr').nth(7).waitFor();
    t.equal(await page.locator('#partitions tbody tr').count(), 8, 'one row per partition');
    t.match(await page.locator('#partitions').innerText(), /ok/);
    await page.getByText('No deployments yet').waitFor();
  });

  await t.test('register: the error, with its code and remedy', async (t) => {
    await page.getByRole('link', { name: 'Register', exact: true }).click();
    await page.locator('input[name=uri]').fill('http://127.0.0.1:1/');
    await page.getByRole('button', { name: 'Preview (dry run)' }).click();
    const err = page.locator('.error-box');
    await err.waitFor();
    const text = await err.innerText();
    t.match(text, /META0003/, 'the code is shown');
    await err.locator('.remedy').waitFor();
    t.match(await err.innerText(), /Remedy:/, 'the remedy is shown');
    t.ok(await err.locator('a.code[href="/ui/errors/META0003"]').count(), 'the code links to the catalogue');
    await shot(page, 'register-error');
  });

  await t.test('register through the form: dry run first, then the registration', async (t) => {
    await page.locator('input[name=uri]').fill(uri);
    await page.getByRole('button', { name: '+ add header' }).click();
    await page.getByLabel('header name').fill('x-keel-test');
    await page.getByLabel('header value').fill('ui');
    await page.getByRole('button', { name: 'Preview (dry run)' }).click();
    const preview = page.locator('#register-preview');
    await preview.waitFor();
    const text = await preview.innerText();
    t.match(text, /Adds a new deployment/);
    for (const s of ['Counter', 'Flow', 'Drift', 'Swap', 'Signup']) t.match(text, new RegExp(`${s}[\\s\\S]*?added`), `${s} is shown as added`);
    t.same((await adminCall(keel, 'GET', '/deployments')).json.deployments, [], 'the dry run registered nothing');
    await shot(page, 'register-dry-run');
    await page.locator('#register-confirm').click();
    await page.locator('#register-result').waitFor();
    t.match(await page.locator('#register-result').innerText(), /Registered/);
    const deps = (await adminCall(keel, 'GET', '/deployments')).json.deployments;
    t.equal(deps.length, 1, 'now registered');
    t.same(deps[0].additional_headers, { 'x-keel-test': 'ui' }, 'with the header from the form');
    await shot(page, 'register-done');

    // The same endpoint again: the dry run says nothing changes.
    await page.getByRole('button', { name: 'Preview (dry run)' }).click();
    await page.locator('#register-preview').waitFor();
    t.match(await page.locator('#register-preview').innerText(), /already registered .* changes nothing/);

    // A new revision of Counter elsewhere: shown as an update, with what changes; not registered.
    const CounterV2 = restate.object({ name: 'Counter', handlers: { add: async () => 0, get: restate.handlers.object.shared(async () => 0), reset: async () => {} } });
    const uri2 = await serveServices(t, [CounterV2]);
    await page.locator('input[name=uri]').fill(uri2);
    await page.getByRole('button', { name: 'Preview (dry run)' }).click();
    await page.locator('#register-preview').waitFor();
    const upd = await page.locator('#register-preview tr.change-updated').innerText();
    t.match(upd, /Counter[\s\S]*updated[\s\S]*1 → 2[\s\S]*handlers added: reset/);
    await page.getByRole('button', { name: 'Back' }).click();
    t.equal((await adminCall(keel, 'GET', '/deployments')).json.deployments.length, 1, 'still one deployment');
  });

  await t.test('overview lists the deployment and the services with their handlers', async (t) => {
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.locator('#deployments tbody tr').first().waitFor();
    t.match(await page.locator('#deployments').innerText(), new RegExp(uri.replace(/[/.]/g, '\\$&')));
    await page.locator('#svc-Counter summary').click();
    const counter = await page.locator('#svc-Counter').innerText();
    t.match(counter, /VirtualObject/);
    t.match(counter, /add/);
    t.match(counter, /Shared/, 'the shared handler type is shown');
    await shot(page, 'overview');
  });

  let waitId;
  await t.test('invocations: appears live, journal, kill, the list changes', async (t) => {
    await page.goto(ui('/invocations?service=Flow'));
    await page.locator('#invocation-count').waitFor();
    t.match(await page.locator('#invocation-count').innerText(), /^0 invocations/);
    const sent = await ingress(keel, '/Flow/wait/send', null);
    t.equal(sent.status, 202);
    waitId = sent.body.invocationId;
    const row = page.locator(`#invocations tr[data-id="${waitId}"]`);
    await row.waitFor({ timeout: 10_000 });
    t.pass('the new invocation appears without a reload');
    await eventually(async () => ['running', 'suspended'].includes(await row.getAttribute('data-status')), { timeout_ms: 10_000 });
    await shot(page, 'invocations');

    await row.getByRole('link', { name: waitId }).click();
    await page.locator('#journal').waitFor();
    t.equal(new URL(page.url()).pathname, `/ui/invocations/${waitId}`);
    const journal = page.locator('#journal');
    await journal.locator('[data-kind="Sleep"]').waitFor();
    const jt = await journal.innerText();
    t.match(jt, /Input/);
    t.match(jt, /Run[\s\S]*“before”[\s\S]*"ready"/, 'the run entry with its name and result');
    t.match(jt, /Sleep[\s\S]*until/, 'the sleep with its wake-up time');
    t.match(await page.locator('#invocation-summary').innerText(), /Flow\/wait/);
    await shot(page, 'invocation');

    const statusOf = async (id) => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${id}'`))[0]?.status;
    await page.locator('#invocation-actions button[data-action="pause"]').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Pause' }).click();
    await eventually(async () => (await statusOf(waitId)) === 'paused');
    await page.locator('.id-title + .badge', { hasText: 'paused' }).waitFor({ timeout: 10_000 });
    t.pass('paused, and the page shows it');
    await page.locator('#invocation-actions button[data-action="resume"]').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Resume' }).click();
    await eventually(async () => ['running', 'suspended'].includes(await statusOf(waitId)));
    await page.locator('.id-title + .badge', { hasText: /running|suspended/ }).waitFor({ timeout: 10_000 });
    t.pass('resumed');

    await page.locator('#invocation-actions button[data-action="kill"]').click();
    const dialog = page.getByRole('dialog');
    await dialog.waitFor();
    t.match(await dialog.innerText(), /Kill this invocation\?/);
    await dialog.getByRole('button', { name: 'Kill' }).click();
    await page.locator('#action-result').waitFor();
    await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${waitId}'`))[0]?.status === 'completed');
    await page.locator('.badge', { hasText: 'completed' }).first().waitFor({ timeout: 10_000 });
    t.pass('the page shows the invocation completed');

    await page.goBack();
    await eventually(async () => (await row.getAttribute('data-status')) === 'completed', { timeout_ms: 10_000 });
    t.match(await row.innerText(), /failure/, 'the killed invocation is listed as a failure');
  });

  await t.test('bulk cancel on a filter: counted, confirmed, applied', async (t) => {
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await ingress(keel, '/Flow/wait/send', null)).body.invocationId);
    await eventually(async () => (await query(keel, "SELECT COUNT(*) AS n FROM sys_invocation WHERE target_handler_name = 'wait' AND status IN ('running', 'suspended')"))[0].n === 3);
    await page.goto(ui('/invocations?service=Flow&handler=wait&status=active'));
    await eventually(async () => /^3 invocations/.test(await page.locator('#invocation-count').innerText()), { timeout_ms: 10_000 });
    await page.locator('select[name=bulk-action]').selectOption('cancel');
    await page.locator('#bulk-run').click();
    const dialog = page.getByRole('dialog');
    await dialog.waitFor();
    t.match(await dialog.locator('#bulk-count').innerText(), /^3 invocations match/);
    await shot(page, 'invocations-bulk');
    await dialog.getByRole('button', { name: 'Cancel 3' }).click();
    await eventually(async () => /Done: 3\/3/.test(await page.locator('#bulk-progress').innerText()), { timeout_ms: 10_000 });
    await eventually(async () => {
      const rows = await query(keel, `SELECT status FROM sys_invocation WHERE id IN (${ids.map((i) => `'${i}'`).join(',')})`);
      return rows.length === 3 && rows.every((r) => r.status === 'completed');
    });
    await eventually(async () => /^0 invocations/.test(await page.locator('#invocation-count').innerText()), { timeout_ms: 10_000 });
    t.pass('the cancelled invocations left the filtered list');
  });

  await t.test('a completed call chain: results in the timeline', async (t) => {
    const r = await ingress(keel, '/Flow/go', 'keel');
    t.equal(r.status, 200);
    const id = r.headers.get('x-restate-id');
    await page.goto(ui(`/invocations/${id}`));
    await page.locator('#journal [data-kind="Output"]').waitFor();
    const jt = await page.locator('#journal').innerText();
    t.match(jt, /“greet”[\s\S]*"hello keel"/);
    t.match(jt, /Call[\s\S]*→ Counter\/flow\/add/);
    t.match(jt, /Output[\s\S]*"hello keel #1"/);
    const child = page.locator('#journal a[href^="/ui/invocations/inv_"]').first();
    t.ok(await child.count(), 'the called invocation is linked');

    await page.locator('#invocation-actions button[data-action="restart-as-new"]').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Restart as new' }).click();
    const fresh = page.locator('#action-result a');
    await fresh.waitFor();
    const freshId = await fresh.innerText();
    t.not(freshId, id, 'a new invocation');
    await fresh.click();
    await page.locator('#journal [data-kind="Output"]').waitFor({ timeout: 10_000 });
    t.match(await page.locator('#journal').innerText(), /"hello keel #2"/, 'the restarted invocation ran again from the same input');
    t.match(await page.locator('#invocation-summary').innerText(), new RegExp(`restarted from\\s+${id}`));

    await page.goto(ui(`/invocations/${id}`));
    await page.locator('#invocation-actions button[data-action="purge"]').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Purge' }).click();
    await page.locator('#not-found').waitFor({ timeout: 10_000 });
    t.same(await query(keel, `SELECT id FROM sys_invocation WHERE id = '${id}'`), [], 'purged');
  });

  await t.test('RT0016: the recorded entry and the handler side by side', async (t) => {
    const sent = await ingress(keel, '/Drift/k1/go/send', null);
    const id = sent.body.invocationId;
    await eventually(async () => (await query(keel, `SELECT last_failure_error_code AS c FROM sys_invocation WHERE id = '${id}'`))[0]?.c === 'RT0016');
    await page.goto(ui(`/invocations/${id}`));
    const m = page.locator('#mismatch');
    await m.waitFor({ timeout: 10_000 });
    t.match(await m.locator('.side.recorded').innerText(), /SetState[\s\S]*key alpha/, 'the recorded entry, from the journal');
    t.equal(await m.locator('.side.handler .op').innerText(), 'set state', 'what the handler sent, from the failure message');
    t.equal(await m.locator('.side.recorded dd[data-field="key"]').innerText(), 'alpha', 'the recorded key');
    t.equal(await m.locator('.side.handler dd[data-field="key"]').innerText(), 'beta', 'the key the handler set on replay');
    t.match(await page.locator('#last-failure').innerText(), /Remedy:/);
    await shot(page, 'invocation-rt0016');

    // The other form of the message: a different operation where the journal has another.
    const swap = (await ingress(keel, '/Swap/go/send', null)).body.invocationId;
    await eventually(async () => (await query(keel, `SELECT last_failure_error_code AS c FROM sys_invocation WHERE id = '${swap}'`))[0]?.c === 'RT0016');
    await page.goto(ui(`/invocations/${swap}`));
    await m.waitFor({ timeout: 10_000 });
    t.match(await m.locator('.side.recorded .op').innerText(), /^Run “step”/, 'the recorded step, from the journal');
    t.equal(await m.locator('.side.handler .op').innerText(), 'sleep', 'the handler slept instead');
    await shot(page, 'invocation-rt0016-other');
    await adminCall(keel, 'PATCH', `/invocations/${swap}/kill`);

    await page.goto(ui(`/invocations/${id}`));
    await page.locator('#last-failure h2 a.code').click();
    await page.locator('#error-entry').waitFor();
    t.equal(new URL(page.url()).pathname, '/ui/errors/RT0016', 'the code links to its catalogue page');
    t.match(await page.locator('#error-entry').innerText(), /Journal mismatch/);
    await shot(page, 'error');
    await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
  });

  await t.test('state: view and edit a virtual object key', async (t) => {
    t.equal((await ingress(keel, '/Counter/c1/add', 5)).body, 5);
    await page.goto(ui('/state?service=Counter'));
    await page.getByRole('link', { name: 'c1' }).click();
    const table = page.locator('#state-table');
    await table.locator('tr[data-key="count"]').waitFor();
    t.match(await table.locator('tr[data-key="count"]').innerText(), /count\s+5/);
    // Keel's own state TTL: shown with when this key's state goes.
    t.equal((await adminCall(keel, 'PATCH', '/services/Counter', { state_ttl: '1h' })).status, 200);
    t.equal((await ingress(keel, '/Counter/c1/add', 0)).body, 5);
    await page.reload();
    await page.locator('#state-ttl').waitFor();
    // The expiry comes from its own query, after the state's (and again when the state reloads): read both in one look.
    const ttlLine = await eventually(async () => {
      const text = await page.locator('#state-ttl').innerText();
      return /expires in/.test(text) ? text : undefined;
    }, { timeout_ms: 10_000 });
    t.match(ttlLine, /State TTL of Counter: 1h after the last access\. This key's state expires in (59m|1h)/);
    t.equal((await adminCall(keel, 'PATCH', '/services/Counter', { state_ttl: '0' })).status, 200);
    await page.reload();
    await table.locator('tr[data-key="count"]').waitFor();
    await page.locator('#state-edit').click();
    await page.getByLabel('value of count').fill('42');
    await page.locator('#state-add').click();
    await page.getByLabel('state key').nth(1).fill('label');
    await page.getByLabel('value of label').fill('"hello"');
    await shot(page, 'state-edit');
    await page.locator('#state-save').click();
    const dialog = page.getByRole('dialog');
    await dialog.waitFor();
    const changes = await dialog.locator('#state-changes').innerText();
    t.match(changes, /add label/);
    t.match(changes, /change count/);
    await dialog.getByRole('button', { name: 'Write state' }).click();
    await page.locator('#state-note, .error-box').first().waitFor();
    t.equal(await page.locator('.error-box').count(), 0, await page.locator('main').innerText());
    await page.locator('#state-note').waitFor();
    await table.locator('tr[data-key="label"]').waitFor();
    const rows = await query(keel, "SELECT key, value_utf8 FROM state WHERE service_name = 'Counter' AND service_key = 'c1' ORDER BY key");
    t.same(rows.map((r) => [r.key, r.value_utf8]), [['count', '42'], ['label', '"hello"']], 'Keel holds the edited state');
    t.equal((await ingress(keel, '/Counter/c1/get', null)).body, 42, 'the handler sees the edited state');
    await shot(page, 'state');

    // Changed behind the page's back: the edit is refused, nothing is overwritten.
    await page.locator('#state-edit').click();
    await page.getByLabel('value of count').fill('7');
    t.equal((await ingress(keel, '/Counter/c1/add', 1)).body, 43);
    await page.locator('#state-save').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Write state' }).click();
    await page.locator('.error-box', { hasText: 'changed' }).waitFor();
    t.equal((await ingress(keel, '/Counter/c1/get', null)).body, 43, 'the concurrent change was kept');
  });

  await t.test('paging, and the code and age filters', async (t) => {
    const total = (await query(keel, 'SELECT COUNT(*) AS n FROM sys_invocation'))[0].n;
    t.ok(total > 10, `more than a page of 10 (${total})`);
    await page.goto(ui('/invocations?size=10'));
    await page.locator('#invocations tbody tr[data-id]').nth(9).waitFor();
    t.equal(await page.locator('#invocations tbody tr[data-id]').count(), 10);
    const first = await page.locator('#invocations tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
    await page.getByRole('button', { name: 'Older →' }).click();
    await eventually(async () => new URL(page.url()).searchParams.get('page') === '1');
    await eventually(async () => {
      const ids = await page.locator('#invocations tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
      return ids.length === Math.min(10, total - 10) && ids.every((i) => !first.includes(i));
    });
    t.pass('page 2 holds the next, older invocations');

    await page.goto(ui('/invocations?code=RT0016'));
    await eventually(async () => /^\d+ invocations? · last failure RT0016/.test(await page.locator('#invocation-count').innerText()));
    const codes = await page.locator('#invocations tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.innerText));
    t.ok(codes.length >= 1 && codes.every((c) => /RT0016/.test(c)), 'only RT0016 failures');
    await page.locator('select[name=age]').selectOption('gt1d');
    await eventually(async () => /^0 invocations · older than a day, last failure RT0016/.test(await page.locator('#invocation-count').innerText()));
    t.equal(new URL(page.url()).searchParams.get('age'), 'gt1d', 'the filter is in the URL');
  });

  await t.test('workflow promises and subscriptions', async (t) => {
    t.equal((await ingress(keel, '/Signup/u1/run', null)).body, 'yes');
    await page.goto(ui('/promises?service=Signup'));
    await page.locator('#promises').waitFor();
    t.match(await page.locator('#promises').innerText(), /u1[\s\S]*email-confirmed[\s\S]*completed[\s\S]*"yes"/);
    await shot(page, 'promises');
    const sub = await adminCall(keel, 'POST', '/subscriptions', { source: 'kafka://local/orders', sink: 'service://Counter/add' });
    t.equal(sub.status, 201, sub.text);
    await page.goto(ui('/subscriptions'));
    await page.locator('#subscriptions').waitFor();
    // The row comes from the list, the consumer's state from its status route a moment later.
    await page.locator('#subscriptions').getByText('starting').waitFor({ timeout: 15_000 });
    const st = await page.locator('#subscriptions').innerText();
    t.match(st, /kafka:\/\/local\/orders\s+service:\/\/Counter\/add/);
    t.match(st, /starting/, 'its consumer, which cannot reach the cluster');
    t.match(st, /unknown/, 'no made-up lag');
    t.match(await page.locator('main').innerText(), /local\s+127\.0\.0\.1:9092/, 'the configured cluster');
    await shot(page, 'subscriptions');
    await page.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await page.getByText('No subscriptions').waitFor();
    t.same((await adminCall(keel, 'GET', '/subscriptions')).json.subscriptions, [], 'deleted');
  });

  await t.test('schedules: next firing, last outcome, fire now, pause, delete', async (t) => {
    const put = await adminCall(keel, 'PUT', '/schedules/ui-tick', { target: 'Counter/sched/add', every: '1h', input: 5 });
    t.equal(put.status, 201, put.text);
    await page.goto(ui('/schedules'));
    const row = page.locator('#schedules tr[data-name="ui-tick"]');
    await row.waitFor();
    t.match(await row.innerText(), /ui-tick\s+Counter\/sched\/add\s+every 1h[\s\S]*in (1h|60m|59m)/, 'the next firing, an hour from now');
    await row.getByRole('button', { name: 'fire now' }).click();
    await eventually(async () => /succeeded/.test(await row.innerText()), { timeout_ms: 10_000 });
    t.equal((await ingress(keel, '/Counter/sched/get', null)).body, 5, 'the firing ran with its input');
    await shot(page, 'schedules');
    await row.getByRole('button', { name: 'pause' }).click();
    await eventually(async () => /paused/.test(await row.innerText()));
    t.equal((await adminCall(keel, 'GET', '/schedules/ui-tick')).json.paused, true, 'paused through the API');
    await row.getByRole('button', { name: 'delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await page.getByText('No schedules').waitFor();
    t.equal((await adminCall(keel, 'GET', '/schedules/ui-tick')).status, 404, 'deleted');
  });

  await t.test('SQL console: table and CSV export', async (t) => {
    await page.goto(ui('/sql'));
    await page.locator('textarea[name=query]').fill("SELECT target_handler_name AS handler, COUNT(*) AS n FROM sys_invocation WHERE target_service_name = 'Flow' GROUP BY target_handler_name ORDER BY handler");
    await page.locator('#sql-run').click();
    await page.locator('#sql-summary').waitFor();
    t.match(await page.locator('#sql-summary').innerText(), /^2 rows/);
    const table = await page.locator('table.data').innerText();
    t.match(table, /handler\s+n/);
    t.match(table, /go\s+1/);
    t.match(table, /wait\s+4/);
    const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#sql-csv').click()]);
    const csv = fs.readFileSync(await download.path(), 'utf8');
    t.equal(csv, 'handler,n\r\ngo,1\r\nwait,4\r\n');
    await shot(page, 'sql');
    await page.locator('textarea[name=query]').fill('SELECT nope FROM nowhere');
    await page.locator('#sql-run').click();
    await page.locator('.error-box').waitFor();
    t.match(await page.locator('.error-box').innerText(), /Query failed/);
  });

  await t.test('the cluster page of a node that runs alone', async (t) => {
    await page.goto(ui('/cluster'));
    await page.locator('#single-node').waitFor();
    t.match(await page.locator('#single-node').innerText(), /runs alone/, 'says so, and how to make it a node of a cluster');
  });

  await t.test('flow control: rules, a queue paused and resumed from the page, the counters', async (t) => {
    await page.goto(ui('/flow'));
    await page.locator('#no-rules').waitFor();
    t.pass('no rules: says nothing is limited');
    const put = await adminCall(keel, 'PUT', '/limits/rules', [{ pattern: 'ui', limits: { concurrency: 1, rate: { starts: 10, interval_ms: 1000 }, backlog: 50 }, description: 'one at a time' }]);
    t.equal(put.status, 200, put.text);
    const sent = [];
    for (let i = 0; i < 2; i++) sent.push((await ingress(keel, '/restate/scope/ui/send/Flow/wait', null, { 'x-restate-limit-key': 'acme' })).body.invocationId);
    const rules = page.locator('#rules tbody tr');
    await rules.first().waitFor();
    t.match(await rules.first().innerText(), /ui\s+1\s+10 per 1,000 ms\s+50\s+one at a time\s+enabled/, 'the rule with its rate and backlog');
    const queue = page.locator('#queues tbody tr');
    await queue.first().waitFor();
    t.match(await queue.first().innerText(), /ui\s+acme\s+1\s+1\b[\s\S]*open/, 'one waits behind the one running');
    t.match(await page.locator('#counters').innerText(), /ui\s+Scope\s+1\s+1\s+ui\s+0\s+1/, 'the scope counter: 1 running, limit 1, 1 waiting on it');
    await page.locator('#queues button.queue-toggle').first().click();
    await eventually(async () => /paused/.test(await queue.first().innerText()));
    t.same(await query(keel, "SELECT queue_is_paused FROM sys_vqueue_meta WHERE scope = 'ui'"), [{ queue_is_paused: true }], 'paused from the page');
    await page.locator('#queues button.queue-toggle').first().click();
    await eventually(async () => /open/.test(await queue.first().innerText()));
    t.pass('resumed from the page');
    for (const id of sent) await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
    await page.locator('#no-queues').waitFor();
    t.pass('killed: no queue left');
  });

  await t.test('narrow screen', async (t) => {
    const narrow = await newPage(browser, t, { width: 390, height: 844 });
    await narrow.page.goto(ui('/invocations?service=Flow'));
    await narrow.page.locator('#invocations tbody tr').first().waitFor();
    const overflow = await narrow.page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    t.ok(overflow <= 1, `the page itself does not scroll sideways (${overflow}px); wide tables scroll in their box`);
    await shot(narrow.page, 'invocations-narrow');
    await narrow.page.goto(ui(`/invocations/${waitId}`));
    await narrow.page.locator('#journal').waitFor();
    await shot(narrow.page, 'invocation-narrow');
    t.same(narrow.problems, []);
  });

  t.same(problems, [], 'no page errors, console errors or requests outside the admin origin');
});
