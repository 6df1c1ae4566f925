// Admin inputs checked at the edge: additional_headers that no HTTP request can carry (CR LF,
// bad names, hop-by-hop headers) are KEEL0002 naming the header, over HTTP/1.1 and HTTP/2 alike,
// and nothing is stored; an endpoint that cannot be reached answers 502 META0003 with the
// remedy within the bounded discovery time; malformed paths are coded 400s.
import t from 'tap';
import net from 'node:net';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, adminCall, eventually } from './helpers/keel.mjs';

const greeter = restate.service({ name: 'Greeter', handlers: { greet: async (_ctx, n) => `hi ${n}` } });

/** A TCP server that accepts connections and never says a word. */
async function silentServer(t) {
  const sockets = new Set();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }));
  return `http://127.0.0.1:${server.address().port}/`;
}

t.test('additional_headers that cannot be sent are refused, naming the header, and never stored', async (t) => {
  const keel = await startKeel(t);
  const uri = await serveServices(t, [greeter]);
  const h1 = await serveServices(t, [greeter], { http1: true });
  const bad = [
    [{ 'x-auth': 'a\r\nx-injected: 1' }, /additional_headers\.x-auth must be a single-line header value/],
    [{ 'x-auth': 'a\nb' }, /additional_headers\.x-auth/],
    [{ 'x-auth': 'a\u0000b' }, /additional_headers\.x-auth/],
    [{ 'bad name': 'v' }, /additional_headers\.bad name is not a valid header name/],
    [{ 'x-a\r\nb': 'v' }, /is not a valid header name/],
    [{ Connection: 'close' }, /additional_headers\.Connection names a header Keel sets itself or that HTTP\/2 forbids/],
    [{ 'x-restate-jwt-v1': 'forged' }, /x-restate-jwt-v1 names a header/],
  ];
  for (const [headers, message] of bad) {
    for (const [target, extra] of [[uri, {}], [h1, { use_http_11: true }]]) {
      const r = await adminCall(keel, 'POST', '/deployments', { uri: target, additional_headers: headers, ...extra });
      const what = `${JSON.stringify(headers)} ${extra.use_http_11 ? 'HTTP/1.1' : 'HTTP/2'}`;
      t.equal(r.status, 400, `${what}: ${r.text}`);
      t.equal(r.json?.restate_code, 'KEEL0002', what);
      t.match(r.json?.message, message, what);
    }
  }
  const tooMany = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`x-h${i}`, 'v']));
  const many = await adminCall(keel, 'POST', '/deployments', { uri, additional_headers: tooMany });
  t.equal(many.status, 400);
  t.match(many.json.message, /additional_headers must NOT have more than 64 properties/);
  t.same((await adminCall(keel, 'GET', '/deployments')).json.deployments, [], 'nothing was stored');

  const ok = await adminCall(keel, 'POST', '/deployments', { uri, additional_headers: { 'x-auth': 'tab\tand spaces ok' } });
  t.equal(ok.status, 201, ok.text);
  const id = ok.json.id;
  const patch = await adminCall(keel, 'PATCH', `/deployments/${id}`, { additional_headers: { 'x-auth': 'evil\r\nhost: elsewhere' } });
  t.equal(patch.status, 400, 'an update in place is checked too');
  t.equal(patch.json.restate_code, 'KEEL0002');
  t.same((await adminCall(keel, 'GET', `/deployments/${id}`)).json.additional_headers, { 'x-auth': 'tab\tand spaces ok' }, 'unchanged');
  t.equal((await adminCall(keel, 'GET', '/health')).status, 200, 'still serving');
});

t.test('unreachable endpoints: 502 META0003 with the remedy, within the discovery timeout, over HTTP/2 and HTTP/1.1', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__DISCOVERY_TIMEOUT: '1s' } });
  const silent = await silentServer(t);
  const refusing = await new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = s.address().port;
      s.close(() => resolve(`http://127.0.0.1:${port}/`));
    });
  });
  for (const [uri, extra, why] of [
    [silent, {}, /timed out after 1000 ms/],
    [silent, { use_http_11: true }, /timed out after 1000 ms/],
    [refusing, {}, /ECONNREFUSED/],
    [refusing, { use_http_11: true }, /ECONNREFUSED/],
  ]) {
    const started = Date.now();
    const r = await adminCall(keel, 'POST', '/deployments', { uri, ...extra });
    const took = Date.now() - started;
    const what = `${uri} ${extra.use_http_11 ? 'HTTP/1.1' : 'HTTP/2'}`;
    t.equal(r.status, 502, `${what}: ${r.text}`);
    t.equal(r.json?.restate_code, 'META0003', what);
    t.match(r.json?.message, why, what);
    t.match(r.json?.message, /Check that the deployment runs at this address/, `${what}: the remedy is in the message`);
    // Bounded by the 1 s discovery timeout; the margin is for a loaded machine, not a second attempt.
    t.ok(took < 8000, `${what}: answered in ${took} ms`);
  }
  // The log is another process's stdout: wait for the last line to arrive.
  const lines = await eventually(() => (keel.logLines('META0003').length >= 4 ? keel.logLines('META0003') : undefined));
  t.ok(lines.length >= 4 && lines.every((l) => l.level === 40), `logged at warn: the endpoint, not Keel, is at fault: ${JSON.stringify(lines.map((l) => [l.level, l.msg]))}`);
});

t.test('malformed admin paths and ids are coded 4xx, never 500', async (t) => {
  const keel = await startKeel(t);
  for (const [method, path, status, code] of [
    ['GET', '/deployments/%ZZ', 400, 'KEEL0002'],
    ['GET', '/services/%E0%A4', 400, 'KEEL0002'],
    ['GET', '/deployments/not-an-id', 400, 'KEEL0003'],
    ['PATCH', '/invocations/inv_nope/kill', 400, 'KEEL0003'],
    ['GET', `/services/${'s'.repeat(500)}`, 404, 'KEEL0004'],
    ['GET', `/services/${'s'.repeat(9000)}`, 414, 'KEEL0414'],
  ]) {
    const r = await adminCall(keel, method, path);
    t.equal(r.status, status, `${method} ${path.slice(0, 40)}: ${r.text.slice(0, 200)}`);
    t.equal(r.json?.restate_code, code, `${method} ${path.slice(0, 40)}`);
  }
  const body = await fetch(`${keel.admin}/deployments`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"uri":"${'x'.repeat(2 * 1024 * 1024)}"}` });
  t.equal(body.status, 413);
  t.equal((await body.json()).restate_code, 'KEEL0413');
  const errors = keel.output.split('\n').filter((l) => l.startsWith('{') && JSON.parse(l).level >= 50);
  t.same(errors, [], 'no error lines');
});
