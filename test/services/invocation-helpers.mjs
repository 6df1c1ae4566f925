// Helpers shared by the suites of calls, awakeables, cancellation and conformance: admin calls,
// introspection queries, attach/output, an endpoint whose connections can be dropped, and an
// in-process record of what handlers did (keyed by a per-test tag).
import http2 from 'node:http2';
import { randomUUID } from 'node:crypto';
import * as restate from '@restatedev/restate-sdk';
import { adminCall, query } from '../helpers/keel.mjs';

export { adminCall, query };

/** tag -> array of things handlers recorded (from ctx.run bodies or plain code, per attempt). */
export const records = new Map();
export function record(tag, v) {
  if (!records.has(tag)) records.set(tag, []);
  records.get(tag).push(v);
  return v;
}
export function recorded(tag) {
  return records.get(tag) ?? [];
}
/** tag -> counter incremented once per handler attempt (plain code, not journaled). */
const attemptCounters = new Map();
export function bumpAttempt(tag) {
  const n = (attemptCounters.get(tag) ?? 0) + 1;
  attemptCounters.set(tag, n);
  return n;
}
export function attempts(tag) {
  return attemptCounters.get(tag) ?? 0;
}
/** Switches handlers read to decide whether to fail (tag -> boolean). */
export const broken = new Map();

export function tag(prefix = 't') {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export async function invocationRow(keel, id) {
  const rows = await query(keel, `select * from sys_invocation where id = '${id}'`);
  return rows[0];
}

/** GET /restate/invocation/{id}/{attach|output}; returns {status, body}. */
export async function getInvocation(keel, id, what = 'attach') {
  const res = await fetch(`${keel.ingress}/restate/invocation/${id}/${what}`);
  const text = await res.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: res.status, body, headers: res.headers };
}

/** Error lines of Keel's JSON log that mention `code` (e.g. RT0018). */
export function logLinesWith(keel, code) {
  return keel
    .logs()
    .split('\n')
    .filter((l) => l.includes(code));
}

/**
 * Serves SDK services over HTTP/2 like serveServices, but also returns dropConnections(), which
 * destroys every open session (the endpoint "fails" mid-invocation; Keel must retry).
 */
export async function serveDroppable(t, services) {
  const handler = restate.createEndpointHandler({ services });
  const server = http2.createServer(handler);
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  );
  return {
    uri: `http://127.0.0.1:${server.address().port}/`,
    dropConnections() {
      const n = sessions.size;
      for (const s of sessions) s.destroy();
      return n;
    },
  };
}

export const FAST_RETRY = {
  KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms',
  KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '200ms',
};
export const ALWAYS_SUSPEND = { KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '0s' };

/**
 * SIGKILLs Keel and starts it again on the same ports and data, then waits until both ports
 * answer. (keel.restart() alone can return before the new process is ready: its readiness check
 * finds the previous process's "keel is ready" line in the accumulated output.)
 */
export async function crashAndRestart(keel) {
  await keel.restart();
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const [a, b] = await Promise.all([fetch(`${keel.ingress}/restate/health`), fetch(`${keel.admin}/health`)]);
      if (a.status === 200 && b.status === 200) return;
    } catch {}
    if (Date.now() > deadline) throw new Error(`keel did not come back:\n${keel.logs().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
