import t from 'tap';
import { discover, discoverUrl } from '../dist/metadata/discovery.js';
import { MANIFEST_ACCEPT } from '../dist/protocol/versions.js';
import {
  serveH2, serveH1, serveRawH1, serveRawH2, deadPort, greeter, counter, signup, manifest,
} from './services/meta-helpers.mjs';

async function rejectsCode(t, promise, code, re) {
  try {
    await promise;
    t.fail(`expected ${code}`);
  } catch (err) {
    t.equal(err.code, code, `code ${code}: ${err.message}`);
    if (re) t.match(err.message, re);
    return err;
  }
}

t.test('discovers SDK services over HTTP/2', async (t) => {
  const uri = await serveH2(t, [greeter, counter, signup]);
  const d = await discover({ uri });
  t.equal(d.protocol_type, 'BidiStream');
  t.ok(d.min_protocol_version <= 7 && d.max_protocol_version >= 5);
  t.match(d.sdk_version, /^restate-sdk-typescript\//);
  const byName = Object.fromEntries(d.services.map((s) => [s.name, s]));
  t.same(Object.keys(byName).sort(), ['Counter', 'Greeter', 'Signup']);
  t.equal(byName.Greeter.ty, 'Service');
  t.equal(byName.Greeter.handlers[0].name, 'greet');
  t.equal(byName.Greeter.handlers[0].ty, undefined);
  t.equal(byName.Greeter.handlers[0].input_content_type, 'application/json');
  t.equal(byName.Greeter.handlers[0].output_content_type, 'application/json');
  t.equal(byName.Counter.ty, 'VirtualObject');
  t.same(byName.Counter.handlers.map((h) => [h.name, h.ty]).sort(), [['add', 'Exclusive'], ['get', 'Shared']]);
  t.equal(byName.Signup.ty, 'Workflow');
  t.same(byName.Signup.handlers.map((h) => [h.name, h.ty]).sort(), [['run', 'Workflow'], ['status', 'Shared']]);
});

t.test('discovers over HTTP/1.1 with use_http_11 (request-response)', async (t) => {
  const uri = await serveH1(t, [greeter]);
  const d = await discover({ uri, use_http_11: true });
  t.equal(d.protocol_type, 'RequestResponse');
  t.equal(d.services[0].name, 'Greeter');
});

t.test('keeps the path prefix and sends accept + additional headers', async (t) => {
  t.equal(discoverUrl('http://h:1/main/').toString(), 'http://h:1/main/discover');
  t.equal(discoverUrl('http://h:1').toString(), 'http://h:1/discover');
  const raw = await serveRawH2(t, { body: manifest({ protocolMode: 'BIDI_STREAM' }) });
  await discover({ uri: raw.uri + 'sub/path/', additional_headers: { 'x-api-key': 'k1' } });
  t.equal(raw.seen[0].url, '/sub/path/discover');
  t.equal(raw.seen[0].headers.accept, MANIFEST_ACCEPT);
  t.equal(raw.seen[0].headers['x-api-key'], 'k1');
});

t.test('META0003: nothing listening, 401 without credentials', async (t) => {
  const port = await deadPort();
  await rejectsCode(t, discover({ uri: `http://127.0.0.1:${port}/` }), 'META0003', new RegExp(`127\\.0\\.0\\.1:${port}.*ECONNREFUSED`));
  await rejectsCode(t, discover({ uri: `http://127.0.0.1:${port}/`, use_http_11: true }), 'META0003', /ECONNREFUSED/);
  const uri = await serveH2(t, [greeter], { requiredHeader: ['authorization', 'Bearer s3cret'] });
  const err = await rejectsCode(t, discover({ uri }), 'META0003', /401/);
  t.equal(err.status, 502, 'a bad gateway, not a server fault');
  const ok = await discover({ uri, additional_headers: { authorization: 'Bearer s3cret' } });
  t.equal(ok.services[0].name, 'Greeter');
});

t.test('META0003 on timeout', async (t) => {
  const net = await import('node:net');
  const sockets = new Set();
  const server = net.createServer((s) => sockets.add(s)); // accepts, never answers
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close(); });
  const uri = `http://127.0.0.1:${server.address().port}/`;
  await rejectsCode(t, discover({ uri, use_http_11: true }, { timeoutMs: 300 }), 'META0003', /timed out/);
  await rejectsCode(t, discover({ uri }, { timeoutMs: 300 }), 'META0003', /timed out/);
});

t.test('META0014: HTTP/1.1-only endpoint discovered over HTTP/2', async (t) => {
  const uri = await serveH1(t, [greeter]);
  const err = await rejectsCode(t, discover({ uri }), 'META0014', /use_http_11|--use-http1\.1/);
  t.match(err.message, uri.replace(/\/$/, ''));
  t.equal(err.status, 502);
});

t.test('META0015: BIDI_STREAM over HTTP/1.1', async (t) => {
  const raw = await serveRawH1(t, { body: manifest({ protocolMode: 'BIDI_STREAM' }) });
  await rejectsCode(t, discover({ uri: raw.uri, use_http_11: true }), 'META0015', /REQUEST_RESPONSE/);
  const ok = await serveRawH1(t, { body: manifest({ protocolMode: 'REQUEST_RESPONSE' }) });
  t.equal((await discover({ uri: ok.uri, use_http_11: true })).protocol_type, 'RequestResponse');
});

t.test('META0012: protocol versions not overlapping [5,7]', async (t) => {
  const raw = await serveRawH1(t, { body: manifest({ minProtocolVersion: 1, maxProtocolVersion: 2 }) });
  await rejectsCode(t, discover({ uri: raw.uri, use_http_11: true }), 'META0012', /\[1, 2\]/);
  const future = await serveRawH1(t, { body: manifest({ minProtocolVersion: 8, maxProtocolVersion: 9 }) });
  await rejectsCode(t, discover({ uri: future.uri, use_http_11: true }), 'META0012');
  const overlap = await serveRawH1(t, { body: manifest({ minProtocolVersion: 1, maxProtocolVersion: 5 }) });
  t.equal((await discover({ uri: overlap.uri, use_http_11: true })).max_protocol_version, 5);
});

t.test('META0013: bad discovery responses', async (t) => {
  const cases = [
    { contentType: 'application/json', body: manifest(), re: /content-type/ },
    { contentType: null, body: manifest(), re: /content-type/ },
    { body: 'this is not json {', re: /not JSON/ },
    { body: manifest({ services: undefined }), re: /services/ },
    { body: manifest({ services: [{ name: 'X', ty: 'ACTOR', handlers: [] }] }), re: /ty/ },
    { body: manifest({ services: [{ name: '1bad', ty: 'SERVICE', handlers: [] }] }), re: /service name/ },
    { body: manifest({ services: [{ name: 'Ok', ty: 'SERVICE', handlers: [{ name: 'has-dash' }] }] }), re: /handler name/ },
    { body: manifest({ services: [{ name: 'Ok', ty: 'SERVICE', handlers: [{ name: 'h', ty: 'EXCLUSIVE' }] }] }), re: /plain service can only be SHARED/ },
    { body: manifest({ minProtocolVersion: undefined }), re: /ProtocolVersion/ },
    { body: manifest({ services: [{ name: 'Ok', ty: 'SERVICE', handlers: [{ name: 'h', inactivityTimeout: 'soon' }] }] }), re: /inactivityTimeout/ },
  ];
  for (const c of cases) {
    const raw = await serveRawH1(t, c.contentType === undefined ? { body: c.body } : { contentType: c.contentType, body: c.body });
    const err = await rejectsCode(t, discover({ uri: raw.uri, use_http_11: true }), 'META0013', c.re);
    t.equal(err.status, 502, 'a bad gateway');
  }
});

t.test('handler types as Restate maps them: SHARED on a plain service (the Java SDK sends it) is no type; a workflow handler without one is SHARED', async (t) => {
  const raw = await serveRawH1(t, {
    contentType: 'application/vnd.restate.endpointmanifest.v4+json',
    body: manifest({
      services: [
        { name: 'Svc', ty: 'SERVICE', handlers: [{ name: 'a', ty: 'SHARED' }, { name: 'b' }] },
        { name: 'Flow', ty: 'WORKFLOW', handlers: [{ name: 'run', ty: 'WORKFLOW' }, { name: 'peek' }] },
      ],
    }),
  });
  const d = await discover({ uri: raw.uri, use_http_11: true });
  t.same(d.services[0].handlers.map((h) => h.ty), [undefined, undefined]);
  t.same(d.services[1].handlers.map((h) => h.ty), ['Workflow', 'Shared']);
});

t.test('manifest fields: defaults, retention, retry policy, private, metadata', async (t) => {
  const raw = await serveRawH1(t, {
    contentType: 'application/vnd.restate.endpointmanifest.v4+json',
    body: manifest({
      services: [
        {
          name: 'Obj', ty: 'VIRTUAL_OBJECT', documentation: 'doc', metadata: { team: 'a' },
          inactivityTimeout: 30000, abortTimeout: 120000, journalRetention: 3600000, idempotencyRetention: 7200000,
          enableLazyState: true, ingressPrivate: true,
          retryPolicyInitialInterval: 100, retryPolicyMaxInterval: 5000, retryPolicyMaxAttempts: 3,
          retryPolicyExponentiationFactor: 1.5, retryPolicyOnMaxAttempts: 'KILL',
          handlers: [
            { name: 'plain' },
            { name: 'shared', ty: 'SHARED', input: {}, output: { setContentTypeIfEmpty: true, contentType: 'text/plain' }, retryPolicyOnMaxAttempts: 'PAUSE', ingressPrivate: false },
          ],
        },
      ],
    }),
  });
  const d = await discover({ uri: raw.uri, use_http_11: true });
  const s = d.services[0];
  t.equal(s.ty, 'VirtualObject');
  t.equal(s.public, false);
  t.equal(s.inactivity_timeout_ms, 30000);
  t.equal(s.abort_timeout_ms, 120000);
  t.equal(s.journal_retention_ms, 3600000);
  t.equal(s.idempotency_retention_ms, 7200000);
  t.equal(s.enable_lazy_state, true);
  t.equal(s.documentation, 'doc');
  t.same(s.metadata, { team: 'a' });
  t.same(s.retry_policy, { initial_interval_ms: 100, max_interval_ms: 5000, max_attempts: 3, exponentiation_factor: 1.5, on_max_attempts: 'kill' });
  const [plain, shared] = s.handlers;
  t.equal(plain.ty, 'Exclusive');
  t.equal(plain.input_content_type, '*/*');
  t.equal(plain.output_content_type, 'application/json');
  t.equal(plain.public, false);
  t.equal(shared.ty, 'Shared');
  t.equal(shared.input_content_type, undefined, 'input present without contentType means empty');
  t.equal(shared.output_content_type, 'text/plain');
  t.equal(shared.output_set_content_type_if_empty, true);
  t.equal(shared.public, true);
  t.same(shared.retry_policy, { on_max_attempts: 'pause' });
});
