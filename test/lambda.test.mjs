// Function-platform deployments by ARN: Keel calls Lambda Invoke with @aws-sdk/client-lambda,
// redirected by AWS_ENDPOINT_URL_LAMBDA to an emulator in this process that runs the real
// Restate SDK Lambda handler.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { createEndpointHandler } from '@restatedev/restate-sdk/lambda';
import { greeter } from '../examples/greeter/greeter.mjs';
import { startKeel, serveServices, register, ingress, eventually, adminCall as admin } from './helpers/keel.mjs';
import { startLambdaEmulator, manifestFunction } from './services/lambda-emulator.mjs';

const ARN = 'arn:aws:lambda:eu-central-1:123456789012:function:greeter:7';

async function setup(t, env = {}) {
  const emu = await startLambdaEmulator(t);
  const keel = await startKeel(t, {
    env: { AWS_ENDPOINT_URL_LAMBDA: emu.url, AWS_ENDPOINT_URL_STS: emu.url, AWS_REGION: 'eu-central-1', ...env },
  });
  return { emu, keel };
}

t.test('register by ARN: discovery through Lambda Invoke, the Lambda deployment view, Greeter/greet completes', async (t) => {
  const { emu, keel } = await setup(t);
  const ran = [];
  const counted = restate.service({
    name: 'Counter',
    handlers: {
      hello: async (ctx, name) => {
        await ctx.run('step', () => ran.push(name));
        return `hello ${name}`;
      },
    },
  });
  emu.add(ARN, createEndpointHandler({ services: [greeter, counted] }));

  const reg = await admin(keel, 'POST', '/deployments', { arn: ARN });
  t.equal(reg.status, 201, reg.text);
  t.same(reg.json.services.map((s) => s.name).sort(), ['Counter', 'Greeter']);
  // Discovery was one Invoke of the full ARN with the API-Gateway-like event.
  const disc = emu.calls[0];
  t.equal(disc.fn, ARN);
  t.equal(disc.event.path, '/discover');
  t.equal(disc.event.httpMethod, 'GET');
  t.match(disc.event.headers.accept, /application\/vnd\.restate\.endpointmanifest\.v4\+json/);
  t.equal(disc.event.isBase64Encoded, true);
  t.match(disc.headers.authorization, /AWS4-HMAC-SHA256/, 'SigV4 signed');
  t.notOk(disc.headers['x-amz-invocation-type'], 'default RequestResponse invocation type');

  const list = await admin(keel, 'GET', '/deployments');
  const d = list.json.deployments.find((x) => x.id === reg.json.id);
  t.equal(d.arn, ARN);
  t.equal(d.assume_role_arn, null);
  t.equal(d.protocol_type, 'RequestResponse');
  t.notOk('uri' in d, 'no uri on a Lambda deployment');
  t.notOk('http_version' in d, 'no http_version on a Lambda deployment');
  const detail = await admin(keel, 'GET', `/deployments/${reg.json.id}`);
  t.equal(detail.json.arn, ARN);
  t.notOk('uri' in detail.json);
  // SQL introspection shows it as a lambda deployment.
  const q = await fetch(`${keel.admin}/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ query: `SELECT ty, endpoint FROM sys_deployment WHERE id = '${reg.json.id}'` }),
  }).then((r) => r.json());
  t.same(q.rows, [{ ty: 'lambda', endpoint: ARN }]);

  // Registering the same ARN again with the same metadata is idempotent (200).
  const again = await admin(keel, 'POST', '/deployments', { arn: ARN });
  t.equal(again.status, 200, again.text);
  t.equal(again.json.id, reg.json.id);

  // Invocations go through Lambda too, in request-response mode.
  const before = emu.calls.length;
  const r = await ingress(keel, '/Counter/hello', 'lambda');
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body, 'hello lambda');
  t.same(ran, ['lambda']);
  const inv = emu.calls.slice(before);
  t.ok(inv.length >= 1);
  t.equal(inv[0].event.path, '/invoke/Counter/hello');
  t.equal(inv[0].event.httpMethod, 'POST');
  t.equal(inv[0].event.isBase64Encoded, true);
  t.match(inv[0].event.headers['content-type'], /^application\/vnd\.restate\.invocation\.v[5-7]$/);
  t.equal(inv[0].event.headers.accept, inv[0].event.headers['content-type']);
  t.match(inv[0].event.headers['x-restate-invocation-id'], /^inv_1/);
  t.equal(Buffer.from(inv[0].event.body, 'base64').readUInt16BE(0), 0, 'the body starts with a StartMessage frame');

  // The Greeter: ctx.run, a 1 s durable sleep (the Lambda call suspends), ctx.run again.
  const g0 = emu.calls.length;
  const g = await ingress(keel, '/Greeter/greet', { name: 'lambda' });
  t.equal(g.status, 200, JSON.stringify(g.body));
  t.same(g.body, { result: 'You said hi to lambda!' });
  t.ok(emu.calls.length - g0 >= 2, `suspension and resumption are separate Lambda calls (${emu.calls.length - g0})`);
});

t.test('an unqualified ARN is refused with 400, a malformed one too', async (t) => {
  const { emu, keel } = await setup(t);
  const r = await admin(keel, 'POST', '/deployments', { arn: 'arn:aws:lambda:eu-central-1:123456789012:function:greeter' });
  t.equal(r.status, 400, r.text);
  t.match(r.json.message, /qualified ARN needs a version or alias/);
  const bad = await admin(keel, 'POST', '/deployments', { arn: 'arn:aws:s3:::bucket' });
  t.equal(bad.status, 400);
  const both = await admin(keel, 'POST', '/deployments', { arn: ARN, uri: 'http://127.0.0.1:1/' });
  t.equal(both.status, 400);
  t.equal(emu.calls.length, 0, 'nothing was invoked');
});

t.test('an unknown function is META0003, and so is a function that throws', async (t) => {
  const { emu, keel } = await setup(t);
  const r = await admin(keel, 'POST', '/deployments', { arn: 'arn:aws:lambda:eu-central-1:123456789012:function:nope:1' });
  t.equal(r.status, 502, r.text);
  t.equal(r.json.restate_code, 'META0003');
  t.match(r.json.message, /ResourceNotFoundException/);
  t.equal(emu.calls.length, 1, 'the SDK made exactly one attempt (maxAttempts 1)');

  const throwing = 'arn:aws:lambda:eu-central-1:123456789012:function:broken:$LATEST';
  emu.add(throwing, async () => {
    throw new TypeError('boom');
  });
  const r2 = await admin(keel, 'POST', '/deployments', { arn: throwing });
  t.equal(r2.json.restate_code, 'META0003', r2.text);
  t.match(r2.json.message, /function returned an error.*boom/);

  // A throttled Invoke is META0003 too.
  emu.add(ARN, createEndpointHandler({ services: [greeter] }));
  emu.failNext(1, { status: 429, type: 'TooManyRequestsException' });
  const r3 = await admin(keel, 'POST', '/deployments', { arn: ARN });
  t.equal(r3.json.restate_code, 'META0003', r3.text);
  t.match(r3.json.message, /TooManyRequestsException/);
  t.match(keel.logs(), /META0003/);
  // Keel keeps serving: the same registration now succeeds.
  t.equal((await admin(keel, 'POST', '/deployments', { arn: ARN })).status, 201);
});

t.test('a manifest announcing BIDI_STREAM over Lambda is META0015; no protocolMode means request-response', async (t) => {
  const { emu, keel } = await setup(t);
  const manifest = (mode) => ({
    protocolMode: mode,
    minProtocolVersion: 5,
    maxProtocolVersion: 7,
    services: [{ name: 'Bidi', ty: 'SERVICE', handlers: [{ name: 'run' }] }],
  });
  const bidi = 'arn:aws:lambda:eu-central-1:123456789012:function:bidi:1';
  emu.add(bidi, manifestFunction(manifest('BIDI_STREAM')));
  const r = await admin(keel, 'POST', '/deployments', { arn: bidi });
  t.equal(r.status, 400, r.text);
  t.equal(r.json.restate_code, 'META0015');
  t.match(r.json.message, /function platform/);

  const none = 'arn:aws:lambda:eu-central-1:123456789012:function:nomode:prod';
  const rr = manifest(undefined);
  rr.services[0].inactivityTimeout = 60_000;
  emu.add(none, manifestFunction(rr));
  const role = 'arn:aws:iam::123456789012:role/keel';
  const ok = await admin(keel, 'POST', '/deployments', { arn: none, assume_role_arn: role, dry_run: true });
  t.equal(ok.status, 201, ok.text);
  t.equal((await admin(keel, 'GET', '/deployments')).json.deployments.length, 0, 'dry run registered nothing');
  // The role was assumed through STS and its session credentials signed the Invoke.
  t.equal(emu.assumed[0]?.role, role);
  t.equal(emu.calls.at(-1).headers['x-amz-security-token'], 'assumed-session-token');
  const real = await admin(keel, 'POST', '/deployments', { arn: none, assume_role_arn: role });
  t.equal(real.status, 201, real.text);
  const d = (await admin(keel, 'GET', `/deployments/${real.json.id}`)).json;
  t.equal(d.assume_role_arn, role);
  t.equal(d.protocol_type, 'RequestResponse');
  // RT0021: the inactivity timeout means nothing on a function platform.
  const svc = await admin(keel, 'GET', '/services/Bidi');
  t.equal(svc.json.info?.[0]?.code, 'RT0021', JSON.stringify(svc.json.info));
  t.match(svc.json.info[0].message, /Lambda/);
});

t.test('the function failing during an invocation is retried; 413 from the platform is RT0019', async (t) => {
  const { emu, keel } = await setup(t, {
    KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms',
    KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '100ms',
  });
  const svc = restate.service({ name: 'Echo', handlers: { echo: async (_ctx, s) => s } });
  emu.add(ARN, createEndpointHandler({ services: [svc] }));
  t.equal((await admin(keel, 'POST', '/deployments', { arn: ARN })).status, 201);
  emu.failNext(1, { status: 413, type: 'RequestTooLargeException' });
  emu.failNext(1, { status: 429, type: 'TooManyRequestsException' });
  const r = await ingress(keel, '/Echo/echo', 'x');
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body, 'x');
  await eventually(() => /RT0019/.test(keel.logs()));
  t.match(keel.logs(), /RT0010[^\n]*TooManyRequestsException|TooManyRequestsException[^\n]*RT0010/);
  // An HTTP deployment keeps working beside it.
  const other = restate.service({ name: 'Other', handlers: { hi: async () => 'hi' } });
  await register(keel, await serveServices(t, [other]));
  t.equal((await ingress(keel, '/Other/hi', null)).body, 'hi');
});
