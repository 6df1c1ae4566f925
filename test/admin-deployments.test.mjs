// Removing a deployment without force on a real Keel: refused while an invocation that has not
// completed is pinned to it, allowed once it completed.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { adminCall, eventually, ingress, query, register, serveServices, startKeel } from './helpers/keel.mjs';

const Waiter = restate.service({
  name: 'Waiter',
  handlers: {
    // The step's journal entry pins the invocation to its deployment; then it waits for an
    // awakeable no one resolves.
    wait: async (ctx) => {
      await ctx.run('step', () => 1);
      return await ctx.awakeable().promise;
    },
  },
});

t.test('a superseded deployment with an unfinished invocation pinned to it is kept until it completes', async (t) => {
  const keel = await startKeel(t);
  const first = await register(keel, await serveServices(t, [Waiter]));
  const sent = await ingress(keel, '/Waiter/wait/send', null);
  t.equal(sent.status, 202);
  const invocationId = sent.body.invocationId;
  // Running or suspended (whichever the endpoint chose), but pinned: the attempt started on the first deployment.
  await eventually(async () => (await query(keel, `SELECT pinned_deployment_id FROM sys_invocation WHERE id = '${invocationId}'`))[0]?.pinned_deployment_id === first.id);

  // A second deployment of the same service supersedes the first.
  const second = await register(keel, await serveServices(t, [Waiter]));
  t.not(second.id, first.id);

  const refused = await adminCall(keel, 'DELETE', `/deployments/${first.id}`);
  t.equal(refused.status, 409);
  t.equal(refused.json.restate_code, 'KEEL0016');
  t.match(refused.json.message, /1 invocation\(s\) that are not completed are pinned/);

  t.equal((await adminCall(keel, 'PATCH', `/invocations/${invocationId}/kill`)).status < 300, true, 'killed');
  await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${invocationId}'`))[0]?.status === 'completed');
  const removed = await adminCall(keel, 'DELETE', `/deployments/${first.id}`);
  t.equal(removed.status, 202, 'removed once nothing unfinished is pinned to it');
  t.equal((await adminCall(keel, 'GET', `/deployments/${first.id}`)).status, 404);
});

t.test("registering Keel's own ingress, admin or SQL address is refused with 400 KEEL0007, not a protocol error", async (t) => {
  const keel = await startKeel(t);
  const pg = `http://localhost:${keel.pgsql.port}`;
  for (const [uri, name] of [[keel.admin, 'admin'], [`${keel.ingress}/`, 'ingress'], [pg, 'SQL']]) {
    const r = await adminCall(keel, 'POST', '/deployments', { uri });
    t.equal(r.status, 400, `${name}: ${r.text}`);
    t.equal(r.json.restate_code, 'KEEL0007');
    t.match(r.json.message, new RegExp(`Keel's own ${name}`));
  }
  // The log line is written after the answer (the logger is asynchronous): wait for it.
  await eventually(() => keel.logLines('KEEL0007').length >= 3).catch(() => {});
  t.equal(keel.logLines('KEEL0007').length, 3, 'each logged with its code');
  t.same(keel.logLines('RT0006'), [], 'nothing internal');
});
