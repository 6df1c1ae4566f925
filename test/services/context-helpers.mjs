// Small helpers shared by the context-API suites (objects, workflows, ingress, idempotency): admin SQL, the restate CLI, raw GETs.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { query } from '../helpers/keel.mjs';

export { query };

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', '..', 'node_modules', '.bin', 'restate');

export const INV_ID = /^inv_1[0-9a-zA-Z]{33}$/;

export async function statusOf(keel, id) {
  const rows = await query(keel, `SELECT id, status FROM sys_invocation WHERE id = '${id}'`);
  return rows[0]?.status;
}

/** Any-method request on the ingress; returns { status, headers, body (JSON if it parses), raw }. */
export async function request(keel, method, pathname, { body, headers = {} } = {}) {
  const res = await fetch(`${keel.ingress}${pathname}`, { method, headers, body });
  const raw = Buffer.from(await res.arrayBuffer());
  let parsed = raw.toString();
  try {
    parsed = JSON.parse(parsed);
  } catch {}
  return { status: res.status, headers: res.headers, body: parsed, raw };
}

/** Runs the real restate CLI against the admin API of `keel`. */
export function cli(t, keel, ...args) {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-cli-home-'));
  t.teardown(() => fs.rmSync(home, { recursive: true, force: true }));
  return new Promise((resolve) => {
    execFile(
      CLI,
      args,
      {
        env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, NO_COLOR: '1', TERM: 'dumb' },
        timeout: 60_000,
      },
      (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout: String(stdout), out: String(stdout) + String(stderr) });
      },
    );
  });
}

/**
 * SIGKILLs and restarts Keel, then waits until both ports answer. (The harness's `restart()`
 * returns at once: it looks for "keel is ready" in output that still holds the first run's.)
 */
export async function restartKeel(keel) {
  const before = keel.output.length;
  await keel.restart();
  const deadline = Date.now() + 20_000;
  for (;;) {
    const ready = keel.output.slice(before).includes('keel is ready');
    if (ready) {
      try {
        await fetch(`${keel.ingress}/restate/health`);
        await fetch(`${keel.admin}/health`);
        return;
      } catch {}
    }
    if (Date.now() > deadline) throw new Error(`keel did not come back:\n${keel.output.slice(before)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Rejects if `promise` does not settle within `ms` (so a request that waits wrongly fails fast). */
export function within(ms, promise, what = 'request') {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms))),
  ]);
}
