// Workflows on a real Keel with real SDK services: run once per key (409 / PreviouslyAccepted),
// shared handlers while run waits on a durable promise, resolve/reject/peek, completing twice,
// attach/output (GET and the 1.7 POST forms), lookup, and state per workflow key.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { wf, runs } from './services/workflow-services.mjs';
import { INV_ID, request, within, statusOf, restartKeel } from './services/context-helpers.mjs';

async function setup(t) {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [wf]));
  return keel;
}

const waiting = (keel, key) =>
  eventually(async () => (await ingress(keel, `/Wf/${key}/stage`)).body.stage === 'waiting');

t.test('run executes once per key: second call 409, second send PreviouslyAccepted', async (t) => {
  const keel = await setup(t);
  const first = await ingress(keel, '/Wf/w1/run/send', 'in1');
  t.equal(first.status, 202);
  t.equal(first.body.status, 'Accepted');
  t.match(first.body.invocationId, INV_ID);
  const id = first.body.invocationId;
  await waiting(keel, 'w1');

  const again = await ingress(keel, '/Wf/w1/run/send', 'in1-again');
  t.equal(again.status, 202);
  t.equal(again.body.status, 'PreviouslyAccepted');
  t.equal(again.body.invocationId, id, 'the same invocation');

  const call = await within(5000, ingress(keel, '/Wf/w1/run', 'in1-call'), 'second run call while running');
  t.equal(call.status, 409, JSON.stringify(call.body));
  t.equal(call.body.code, 409);

  t.equal((await ingress(keel, '/Wf/w1/resolve', 'v1')).body, 'resolved');
  const attach = await request(keel, 'GET', '/restate/workflow/Wf/w1/attach');
  t.equal(attach.status, 200);
  t.equal(attach.body, 'run in1 got "v1"', 'the first input is the one that ran');

  const late = await ingress(keel, '/Wf/w1/run', 'in1-late');
  t.equal(late.status, 409, 'a call after completion is 409 too');
  const lateSend = await ingress(keel, '/Wf/w1/run/send', 'in1-late');
  t.equal(lateSend.status, 202);
  t.equal(lateSend.body.status, 'PreviouslyAccepted');
  t.equal(lateSend.body.invocationId, id);
  t.equal(runs.get('w1'), 1, 'the run body executed once');
  t.same((await ingress(keel, '/Wf/w1/stage')).body, { stage: 'done', input: 'in1' });
});

t.test('durable promise: shared handlers while run waits, peek before/after, resolve unblocks, completing twice fails', async (t) => {
  const keel = await setup(t);
  const run = ingress(keel, '/Wf/w2/run', 'in2');
  await waiting(keel, 'w2');
  const peek = await within(3000, ingress(keel, '/Wf/w2/peek'), 'shared handler while run waits');
  t.same(peek.body, { value: null }, 'peek before: not completed');
  const out = await request(keel, 'GET', '/restate/workflow/Wf/w2/output');
  t.equal(out.status, 470, 'output before completion: 470');

  const ok = await ingress(keel, '/Wf/w2/resolveCatch', { answer: 42 });
  t.same(ok.body, { ok: true });
  const r = await run;
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body, 'run in2 got {"answer":42}');
  t.match(r.headers.get('x-restate-id'), INV_ID);
  t.same((await ingress(keel, '/Wf/w2/peek')).body, { value: { answer: 42 } }, 'peek after: the value');

  const twice = await ingress(keel, '/Wf/w2/resolveCatch', 'other');
  t.equal(twice.body.code, 409, `completing twice fails with 409: ${JSON.stringify(twice.body)}`);
  const twiceRaw = await ingress(keel, '/Wf/w2/resolve', 'other');
  t.equal(twiceRaw.status, 409, 'uncaught, the failure reaches the caller as 409');
  const rej = await ingress(keel, '/Wf/w2/reject', 'late');
  t.equal(rej.status, 409, 'rejecting a completed promise fails too');
  t.same((await ingress(keel, '/Wf/w2/peek')).body, { value: { answer: 42 } }, 'the first value stays');

  const output = await request(keel, 'GET', '/restate/workflow/Wf/w2/output');
  t.equal(output.status, 200);
  t.equal(output.body, 'run in2 got {"answer":42}');
  const attach = await request(keel, 'GET', '/restate/workflow/Wf/w2/attach');
  t.equal(attach.status, 200);
  t.equal(attach.body, 'run in2 got {"answer":42}');
  t.equal(attach.headers.get('x-restate-id'), r.headers.get('x-restate-id'));
  t.equal(runs.get('w2'), 1);
});

t.test('reject propagates a terminal failure to run and its attachers', async (t) => {
  const keel = await setup(t);
  const sent = await ingress(keel, '/Wf/w3/run/send', 'in3');
  await waiting(keel, 'w3');
  const attaching = request(keel, 'GET', '/restate/workflow/Wf/w3/attach');
  t.equal((await ingress(keel, '/Wf/w3/reject', 'no way')).body, 'rejected');
  const att = await attaching;
  t.equal(att.status, 500, JSON.stringify(att.body));
  t.match(att.body.message, /no way/);
  await eventually(async () => (await statusOf(keel, sent.body.invocationId)) === 'completed');
  const out = await request(keel, 'GET', '/restate/workflow/Wf/w3/output');
  t.equal(out.status, 500);
  t.match(out.body.message, /no way/);
  t.same((await ingress(keel, '/Wf/w3/stage')).body, { stage: 'waiting', input: 'in3' }, 'run stopped at the promise');
  const peek = await ingress(keel, '/Wf/w3/peek');
  t.not(peek.status, 200, 'peek of a rejected promise fails');
  t.match(JSON.stringify(peek.body), /no way/);
});

t.test('state is per workflow key', async (t) => {
  const keel = await setup(t);
  await ingress(keel, '/Wf/a/run/send', 'alpha');
  await ingress(keel, '/Wf/b/run/send', 'beta');
  await waiting(keel, 'a');
  await waiting(keel, 'b');
  t.same((await ingress(keel, '/Wf/a/stage')).body, { stage: 'waiting', input: 'alpha' });
  t.same((await ingress(keel, '/Wf/b/stage')).body, { stage: 'waiting', input: 'beta' });
  t.same((await ingress(keel, '/Wf/c/stage')).body, { stage: null, input: null }, 'a key that never ran has no state');
  t.equal((await request(keel, 'GET', '/restate/workflow/Wf/c/output')).status, 404, 'output of a workflow key that never ran: 404');
  t.equal((await request(keel, 'GET', '/restate/workflow/Wf/c/attach')).status, 404, 'attach to a workflow key that never ran: 404');
  await ingress(keel, '/Wf/a/resolve', 'A');
  t.equal((await request(keel, 'GET', '/restate/workflow/Wf/a/attach')).body, 'run alpha got "A"');
  t.same((await ingress(keel, '/Wf/a/stage')).body, { stage: 'done', input: 'alpha' });
  t.same((await ingress(keel, '/Wf/b/stage')).body, { stage: 'waiting', input: 'beta' }, 'b unaffected');
  t.same((await ingress(keel, '/Wf/b/peek')).body, { value: null }, 'promises are per key too');
});

t.test('1.7 forms: POST /restate/lookup, /restate/attach, /restate/output with a workflow target', async (t) => {
  const keel = await setup(t);
  const target = JSON.stringify({ target: 'workflow', workflowName: 'Wf', workflowKey: 'w5' });
  const post = (p) => request(keel, 'POST', p, { body: target, headers: { 'content-type': 'application/json' } });
  const before = await post('/restate/lookup');
  t.equal(before.status, 200, JSON.stringify(before.body));
  t.match(before.body.invocationId, INV_ID);

  const sent = await ingress(keel, '/Wf/w5/run/send', 'in5');
  t.equal(sent.headers.get('x-restate-id'), before.body.invocationId, 'lookup computed the id the run got');
  t.equal(sent.body.invocationId, before.body.invocationId);
  const after = await post('/restate/lookup');
  t.same(after.body, { invocationId: sent.body.invocationId });
  await waiting(keel, 'w5');

  const out = await post('/restate/output');
  t.equal(out.status, 470, 'output before completion');
  const attaching = post('/restate/attach');
  await ingress(keel, '/Wf/w5/resolve', 'five');
  const att = await attaching;
  t.equal(att.status, 200, JSON.stringify(att.body));
  t.equal(att.body, 'run in5 got "five"');
  const out2 = await post('/restate/output');
  t.equal(out2.status, 200);
  t.equal(out2.body, 'run in5 got "five"');
  // an invocation target works the same way
  const byId = await request(keel, 'POST', '/restate/output', {
    body: JSON.stringify({ target: 'invocation', invocationId: sent.body.invocationId }),
    headers: { 'content-type': 'application/json' },
  });
  t.equal(byId.status, 200);
  t.equal(byId.body, 'run in5 got "five"');
});

t.test('a run waiting on a promise survives a SIGKILL; an idempotency key on run is rejected', async (t) => {
  const keel = await setup(t);
  const idem = await ingress(keel, '/Wf/w6/run', 'x', { 'idempotency-key': 'nope' });
  t.equal(idem.status, 400, `idempotency-key on run: 400 ${JSON.stringify(idem.body)}`);
  t.equal(runs.get('w6'), undefined, 'and it did not start');
  const sent = await ingress(keel, '/Wf/w6/run/send', 'in6');
  await waiting(keel, 'w6');
  await restartKeel(keel);
  t.same((await ingress(keel, '/Wf/w6/peek')).body, { value: null });
  t.equal((await ingress(keel, '/Wf/w6/resolve', 'after')).body, 'resolved');
  const att = await request(keel, 'GET', '/restate/workflow/Wf/w6/attach');
  t.equal(att.status, 200);
  t.equal(att.body, 'run in6 got "after"');
  t.equal(att.headers.get('x-restate-id'), sent.body.invocationId);
  t.equal(runs.get('w6'), 1, 'the counted run step was not repeated after the restart');
});
