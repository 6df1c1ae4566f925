// HTTP/2 in clear text with prior knowledge (h2c), beside HTTP/1.1 on the same ports, as Restate's
// ingress serves it: calls and admin requests through real HTTP/2 clients (Node's http2 and curl),
// and the edge's limits on HTTP/2 as on HTTP/1.1 — a coded 413, 431 and 408 the client reads, a
// session closed when idle but never under a call in flight, a shutdown not held by open sessions,
// a connection's first bytes (what tells HTTP/2 from HTTP/1.1) bounded in time and safe to reset.
import t from 'tap';
import http2 from 'node:http2';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { execFile } from 'node:child_process';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, eventually, tempDir } from './helpers/keel.mjs';

const MB = 1024 * 1024;

const echo = restate.service({
  name: 'Echo',
  handlers: {
    say: async (_ctx, v) => v,
    /** The headers the handler was given, by name. */
    headers: async (ctx) => Object.fromEntries(ctx.request().headers),
    slow: async (ctx, ms) => {
      await ctx.sleep(ms);
      return `slept ${ms}`;
    },
  },
});

/**
 * One HTTP/2 request on `session`: its status, headers and JSON (or text) body, or the stream's
 * error code when it was reset. `body_bytes` of body are written (all of them, in 1 MiB writes,
 * before anything is read), or `body`; `stall` leaves the stream open after the body.
 */
function h2request(session, headers, { body, body_bytes = 0, stall = false } = {}) {
  let sent = 0;
  return new Promise((resolve) => {
    const stream = session.request(headers, { endStream: body === undefined && body_bytes === 0 && !stall });
    let status;
    let answer = {};
    const chunks = [];
    stream.on('response', (h) => {
      status = h[':status'];
      answer = h;
    });
    stream.on('data', (d) => chunks.push(d));
    // The server ended the stream before the body was all sent (RST_STREAM NO_ERROR after its answer):
    // Node's client leaves its writable side open, so the request is given up here, as curl does.
    stream.on('aborted', () => stream.destroy());
    let error;
    stream.on('error', (e) => (error = e.code ?? e.message));
    stream.on('close', () => {
      const text = Buffer.concat(chunks).toString();
      let json;
      try {
        json = JSON.parse(text);
      } catch {}
      resolve({ status, headers: answer, text, json, rstCode: stream.rstCode, error, sent });
    });
    if (body !== undefined) {
      stream.write(body);
      if (!stall) stream.end();
    } else if (body_bytes > 0) {
      const piece = Buffer.alloc(MB, 0x61);
      const pump = () => {
        while (sent < body_bytes && !stream.destroyed) {
          sent += piece.length;
          if (!stream.write(piece)) return void stream.once('drain', pump);
        }
        if (!stall && !stream.destroyed) stream.end();
      };
      pump();
    }
  });
}

function connect(t, base) {
  // Node's client refuses to send a header block over 64 KB itself: the tests send larger ones.
  const session = http2.connect(base, { maxSendHeaderBlockLength: 4 * MB });
  session.on('error', () => {});
  t.teardown(() => session.destroy());
  return session;
}

function curl(args) {
  return new Promise((resolve) => execFile('curl', ['-s', '--http2-prior-knowledge', ...args], { maxBuffer: 10 * MB }, (err, stdout, stderr) => resolve({ code: err?.code ?? 0, stdout, stderr })));
}

function isCoded(t, r, status, code, what) {
  t.equal(r.status, status, `${what}: ${r.text}${r.error ? ` (${r.error}, rst ${r.rstCode})` : ''}`);
  t.equal(r.json?.restate_code, code, `${what}: coded`);
  t.match(r.json?.message, new RegExp(`^\\[${code}\\] `), `${what}: the message starts with the code`);
}

t.test('calls and admin requests over h2c, HTTP/1.1 on the same ports', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [echo]));

  const ingress = connect(t, keel.ingress);
  const call = await h2request(ingress, { ':method': 'POST', ':path': '/Echo/say', 'content-type': 'application/json' }, { body: JSON.stringify('over h2c') });
  t.equal(call.status, 200, `a call over HTTP/2: ${call.text}`);
  t.equal(call.json, 'over h2c');

  const seen = await h2request(ingress, { ':method': 'POST', ':path': '/Echo/headers', 'content-type': 'application/json', 'x-tenant': 'acme' }, { body: 'null' });
  t.equal(seen.status, 200, seen.text);
  t.equal(seen.json?.['x-tenant'], 'acme', 'the handler gets the request headers');
  t.same(Object.keys(seen.json ?? {}).filter((k) => k.startsWith(':')), [], 'and none of HTTP/2 pseudo-header fields (:path, :authority…)');

  // Several calls at once on one connection: HTTP/2's streams.
  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => h2request(ingress, { ':method': 'POST', ':path': '/Echo/say', 'content-type': 'application/json' }, { body: String(i) })));
  t.same(many.map((r) => r.json), Array.from({ length: 20 }, (_, i) => i), '20 concurrent streams on one session, each answered');

  const sent = await curl(['-X', 'POST', `${keel.ingress}/Echo/say/send`, '-H', 'content-type: application/json', '-d', '"by curl"', '-w', '\n%{http_version} %{http_code}']);
  t.match(sent.stdout, /"invocationId":"inv_/, `curl --http2-prior-knowledge sends: ${sent.stdout} ${sent.stderr}`);
  t.match(sent.stdout, /\n2 202$/, 'over HTTP/2, answered 202');

  const admin = await curl([`${keel.admin}/deployments`, '-w', '\n%{http_version} %{http_code}']);
  t.match(admin.stdout, /"deployments":\[\{/, 'the admin API over HTTP/2 lists the deployment');
  t.match(admin.stdout, /\n2 200$/);
  const services = await h2request(connect(t, keel.admin), { ':method': 'GET', ':path': '/services/Echo' });
  t.equal(services.json?.name, 'Echo', 'and answers Node’s http2 client');

  const h1 = await fetch(`${keel.ingress}/Echo/say`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '"over 1.1"' });
  t.equal(await h1.json(), 'over 1.1', 'HTTP/1.1 still served on the same port');
  const h1admin = await fetch(`${keel.admin}/health`);
  t.equal(h1admin.status, 200);
});

t.test('the edge limits over h2c: 413, 431, 417, resets far past them; the session stays usable', async (t) => {
  const keel = await startKeel(t);
  const ingress = connect(t, keel.ingress);

  const big = await h2request(ingress, { ':method': 'POST', ':path': '/Echo/say', 'content-type': 'application/json', 'content-length': String(50 * MB) }, { body_bytes: 50 * MB });
  isCoded(t, big, 413, 'KEEL0413', 'a 50 MB body to the ingress');
  t.match(big.json?.message, /ingress\.request_size_limit/);
  // Node drops a `connection` field on HTTP/2 itself, with a warning on the server's stderr: none is set.
  t.notMatch(keel.output, /UnsupportedWarning|connection header is not valid/, 'the answer sets no connection field (Node would warn)');
  const streamed = await h2request(ingress, { ':method': 'POST', ':path': '/Echo/say', 'content-type': 'application/json' }, { body_bytes: 40 * MB });
  isCoded(t, streamed, 413, 'KEEL0413', 'a 40 MB body without a content-length');
  // curl with a 50 MB file (it sends a content-length): the answer read, not a reset.
  const file = path.join(tempDir(t), 'fifty');
  fs.writeFileSync(file, Buffer.alloc(50 * MB, 0x61));
  const byCurl = await curl(['-X', 'POST', `${keel.ingress}/Echo/say`, '-H', 'content-type: application/json', '--data-binary', `@${file}`, '-w', '\n%{http_version} %{http_code}']);
  t.match(byCurl.stdout, /"restate_code":"KEEL0413"/, `curl reads the coded 413 (${byCurl.stdout.slice(-60)}, exit ${byCurl.code})`);
  t.match(byCurl.stdout, /\n2 413$/, 'over HTTP/2');
  const after = await h2request(ingress, { ':method': 'GET', ':path': '/restate/health' });
  t.equal(after.status, 200, 'the same session answers the next request');
  // Past 64 MiB the rest of the body is not read: the stream is closed (HTTP/1.1 closes its connection).
  const endless = await h2request(connect(t, keel.ingress), { ':method': 'POST', ':path': '/Echo/say', 'content-type': 'application/json' }, { body_bytes: 1024 * MB });
  isCoded(t, endless, 413, 'KEEL0413', 'a 1 GB body without a content-length');
  t.ok(endless.sent < 256 * MB, `the client could send ${Math.round(endless.sent / MB)} MB of its 1 GB: the server ended the stream past 64 MiB`);

  const admin = connect(t, keel.admin);
  const json = await h2request(admin, { ':method': 'POST', ':path': '/deployments', 'content-type': 'application/json' }, { body: `{"uri":"${'u'.repeat(2 * MB)}"}` });
  isCoded(t, json, 413, 'KEEL0413', 'a 2 MB JSON body to the admin API');
  const registration = JSON.stringify({ uri: 'http://127.0.0.1:1', additional_headers: { 'x-big': 'h'.repeat(10 * MB) } });
  isCoded(t, await h2request(admin, { ':method': 'POST', ':path': '/deployments', 'content-type': 'application/json' }, { body: registration }), 413, 'KEEL0413', '10 MB of additional_headers');

  // http.max_header_size (64 KiB) and http.max_header_count (200), as HTTP/1.1 applies them.
  const wide = await h2request(ingress, { ':method': 'POST', ':path': '/Echo/say', 'x-big': 'b'.repeat(70_000) }, { body: '1' });
  isCoded(t, wide, 431, 'KEEL0431', 'a 70 KB header');
  t.match(wide.json?.message, /http\.max_header_size/);
  const fields = (n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-h${i}`, String(i)]));
  const many = await h2request(admin, { ':method': 'GET', ':path': '/health', ...fields(250) });
  isCoded(t, many, 431, 'KEEL0431', '250 header fields to the admin API');
  t.match(many.json?.message, /http\.max_header_count/);
  const fine = await h2request(admin, { ':method': 'GET', ':path': '/health', ...fields(190) });
  t.equal(fine.status, 200, '190 header fields are within the limit');

  const expect = await h2request(connect(t, keel.ingress), { ':method': 'POST', ':path': '/Echo/say', expect: 'something-else' }, { body: '1' });
  isCoded(t, expect, 417, 'KEEL0417', 'an unknown Expect');

  // Far past the limits Node's HTTP/2 layer resets the stream before keeping the headers.
  const flood = await h2request(connect(t, keel.ingress), { ':method': 'GET', ':path': '/restate/health', ...fields(1000) });
  t.equal(flood.status, undefined, 'a stream with 1,000 header fields is not answered');
  t.not(flood.rstCode, 0, `it is reset (code ${flood.rstCode})`);

  // A header block of 1 MB: Node's HTTP/2 layer ends the whole session (COMPRESSION_ERROR), logged.
  const huge = await h2request(connect(t, keel.ingress), { ':method': 'GET', ':path': '/restate/health', 'x-big': 'z'.repeat(MB) });
  t.equal(huge.status, undefined, `a 1 MB header is not answered (reset ${huge.rstCode}, ${huge.error})`);
  await eventually(() => keel.output.includes('http/2 sessions ended by a protocol error of the client'));
  t.pass('the session it ended is logged');

  const health = await h2request(connect(t, keel.ingress), { ':method': 'GET', ':path': '/restate/health' });
  t.equal(health.status, 200, 'the server is fine');

  // Shutdown with the default idle timeout (1 minute): the sessions get GOAWAY instead of holding it.
});

/** Connects, writes `text`, and waits for the server to close the connection: how long it took and what it answered. */
function rawConnection(base, text) {
  const { port } = new URL(base);
  return new Promise((resolve) => {
    const t0 = Date.now();
    let answer = '';
    const s = net.connect(Number(port), '127.0.0.1', () => text && s.write(text));
    s.on('data', (d) => (answer += d.toString('latin1')));
    s.on('error', () => {});
    s.on('close', () => resolve({ closed_ms: Date.now() - t0, answer }));
    setTimeout(() => s.destroy(), 15_000).unref();
  });
}

/** Resolves once `session` is closed by the server, with the time it took, or undefined after `limit_ms`. */
function closedWithin(session, limit_ms) {
  const t0 = Date.now();
  return new Promise((resolve) => {
    if (session.closed || session.destroyed) return resolve(0);
    session.once('close', () => resolve(Date.now() - t0));
    setTimeout(() => resolve(undefined), limit_ms).unref();
  });
}

t.test('h2c timeouts: an idle session closes, a call in flight keeps it, a stalled body is 408, silent or reset first bytes', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_HTTP__IDLE_TIMEOUT: '1s', KEEL_HTTP__REQUEST_TIMEOUT: '2s', KEEL_HTTP__HEADER_TIMEOUT: '1s' } });
  await register(keel, await serveServices(t, [echo]));

  const idle = connect(t, keel.ingress);
  await h2request(idle, { ':method': 'GET', ':path': '/restate/health' });
  const closed_ms = await closedWithin(idle, 10_000);
  t.ok(closed_ms !== undefined && closed_ms < 5_000, `a session idle past http.idle_timeout (1 s) is closed (${closed_ms} ms)`);

  // PINGs every 300 ms are not a request: the session is closed all the same.
  const pinger = connect(t, keel.ingress);
  await h2request(pinger, { ':method': 'GET', ':path': '/restate/health' });
  const pings = setInterval(() => pinger.closed || pinger.destroyed || pinger.ping(() => {}), 300);
  const pingerClosed_ms = await closedWithin(pinger, 10_000);
  clearInterval(pings);
  t.ok(pingerClosed_ms !== undefined && pingerClosed_ms < 5_000, `a session that only PINGs is closed when idle (${pingerClosed_ms} ms)`);

  const busy = connect(t, keel.ingress);
  const slow = await h2request(busy, { ':method': 'POST', ':path': '/Echo/slow', 'content-type': 'application/json' }, { body: '3000' });
  t.equal(slow.json, 'slept 3000', 'a call of 3 s on a session with a 1 s idle timeout is answered');
  const busyClosed_ms = await closedWithin(busy, 10_000);
  t.ok(busyClosed_ms !== undefined && busyClosed_ms < 5_000, `and that session is closed once idle after it (${busyClosed_ms} ms)`);

  // The first bytes: a connection that sends nothing, or half the HTTP/2 preface, is closed; one
  // reset while its first bytes are read does not bring the server down.
  const silent = await rawConnection(keel.ingress, '');
  const half = await rawConnection(keel.ingress, 'PRI * HTTP/2.0\r\n');
  t.ok(silent.closed_ms < 8_000, `a silent connection is closed (${silent.closed_ms} ms)`);
  t.ok(half.closed_ms < 8_000, `half a preface, then silence: closed (${half.closed_ms} ms, answer: ${JSON.stringify(half.answer.slice(0, 40))})`);
  for (let i = 0; i < 20; i++) {
    const { port } = new URL(keel.ingress);
    const s = net.connect(Number(port), '127.0.0.1', () => s.write('PRI', () => s.resetAndDestroy()));
    s.on('error', () => {});
  }
  await new Promise((r) => setTimeout(r, 200));
  t.equal((await fetch(`${keel.ingress}/restate/health`)).status, 200, '20 connections reset mid-preface: the server answers');

  const stalled = await h2request(connect(t, keel.ingress), { ':method': 'POST', ':path': '/Echo/say', 'content-type': 'application/json' }, { body: '"half', stall: true });
  isCoded(t, stalled, 408, 'KEEL0408', 'a body still arriving after http.request_timeout (2 s)');

  const open = connect(t, keel.admin);
  await h2request(open, { ':method': 'GET', ':path': '/health' });
  const t0 = Date.now();
  await keel.stop();
  t.ok(Date.now() - t0 < 5_000, `SIGTERM with an HTTP/2 session open: stopped in ${Date.now() - t0} ms`);
});
