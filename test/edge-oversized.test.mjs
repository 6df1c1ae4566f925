// Over-limit bodies and heads are answered with their coded 413 and 431 and the client reads the answer, even one
// that writes its whole body before it reads anything (as Python's http.client, Java's
// HttpURLConnection and most scripts do): the server reads and discards the rest of the body, up
// to a bound, and the connection stays usable. On the ingress and the admin API, over HTTP/1.1
// (HTTP/2: edge-h2c.test.mjs).
import t from 'tap';
import net from 'node:net';
import { startKeel } from './helpers/keel.mjs';

const MB = 1024 * 1024;

/**
 * Writes `head` and `body_bytes` of body (or `body`), all of it, and only then reads: the status
 * and JSON of the answer, or the error that ended the exchange (EPIPE, ECONNRESET: the answer was
 * lost). With `then`, sends that next request on the same connection and answers its status too.
 */
function writeAllThenRead(base, head, { body_bytes = 0, body, then } = {}) {
  const { hostname, port } = new URL(base);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname);
    let got = Buffer.alloc(0);
    let first;
    let error;
    const done = (r) => {
      socket.destroy();
      resolve(r);
    };
    const parse = () => {
      const s = got.toString('latin1');
      const cut = s.indexOf('\r\n\r\n');
      if (cut < 0) return undefined;
      const length = Number(/content-length: (\d+)/i.exec(s.slice(0, cut))?.[1] ?? 0);
      if (got.length < cut + 4 + length) return undefined;
      let json;
      try {
        json = JSON.parse(s.slice(cut + 4, cut + 4 + length));
      } catch {}
      got = got.subarray(cut + 4 + length);
      return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(s)?.[1] ?? 0), head: s.slice(0, cut), json };
    };
    socket.on('error', (e) => (error ??= e.code));
    socket.on('close', () => resolve({ ...(first ?? { status: 0 }), error, closed: true }));
    socket.on('data', (d) => {
      got = Buffer.concat([got, d]);
      const r = parse();
      if (r === undefined) return;
      if (first === undefined && then !== undefined) {
        first = r;
        socket.write(then);
        return;
      }
      done(first === undefined ? { ...r, error } : { ...first, next: r, error });
    });
    // Not reading: the answer waits in the socket until everything is written.
    socket.pause();
    (async () => {
      const write = (b) => new Promise((ok) => (socket.write(b) ? ok() : socket.once('drain', ok)));
      await write(Buffer.from(head));
      if (body !== undefined) await write(Buffer.from(body));
      const piece = Buffer.alloc(256 * 1024, 0x61);
      for (let sent = 0; sent < body_bytes && !socket.destroyed; sent += piece.length) await write(piece.subarray(0, Math.min(piece.length, body_bytes - sent)));
      socket.resume();
    })().catch(() => {});
  });
}

function isCoded413(t, r, what) {
  t.equal(r.error, undefined, `${what}: the client wrote its whole body (no ${r.error})`);
  t.equal(r.status, 413, `${what}: ${r.head}`);
  t.equal(r.json?.restate_code, 'KEEL0413', `${what}: coded`);
}

t.test('ingress and admin: 413 read by a client that writes its whole body first', async (t) => {
  const keel = await startKeel(t);
  const health = 'GET /restate/health HTTP/1.1\r\nhost: x\r\n\r\n';

  const body = 50 * MB;
  const call = await writeAllThenRead(keel.ingress, `POST /Echo/say HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body}\r\n\r\n`, { body_bytes: body, then: health });
  isCoded413(t, call, 'a 50 MB body to the ingress');
  t.match(call.json?.message, /ingress\.request_size_limit/);
  t.equal(call.next?.status, 200, 'the connection is still usable: the next request on it is answered');

  const registration = JSON.stringify({ uri: 'http://127.0.0.1:1', additional_headers: { 'x-big': 'h'.repeat(10 * MB) } });
  const headers = await writeAllThenRead(keel.admin, `POST /deployments HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${registration.length}\r\n\r\n`, { body: registration });
  isCoded413(t, headers, 'a registration with 10 MB of additional_headers');

  const json = `{"uri":"${'u'.repeat(2 * MB)}"}`;
  const admin = await writeAllThenRead(keel.admin, `POST /deployments HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${json.length}\r\n\r\n`, { body: json, then: 'GET /health HTTP/1.1\r\nhost: x\r\n\r\n' });
  isCoded413(t, admin, 'a 2 MB JSON body to the admin API');
  t.equal(admin.next?.status, 200, 'and the admin connection is still usable');

  // A head over http.max_header_size (64 KiB) or http.max_header_count: 431, read after the whole request was written.
  const bigHeader = await writeAllThenRead(keel.ingress, `POST /Echo/say HTTP/1.1\r\nhost: x\r\nx-big: ${'b'.repeat(70_000)}\r\ncontent-length: ${MB}\r\n\r\n`, { body_bytes: MB });
  t.equal(bigHeader.error, undefined, 'a 70 KB header and a 1 MB body written whole');
  t.equal(bigHeader.status, 431, `a 70 KB header: ${bigHeader.head}`);
  t.equal(bigHeader.json?.restate_code, 'KEEL0431');
  const many = Array.from({ length: 500 }, (_, i) => `x-h${i}: ${i}\r\n`).join('');
  const manyHeaders = await writeAllThenRead(keel.admin, `POST /deployments HTTP/1.1\r\nhost: x\r\n${many}content-type: application/json\r\ncontent-length: 2\r\n\r\n`, { body: '{}' });
  t.equal(manyHeaders.status, 431, `500 header fields to the admin API: ${manyHeaders.head}`);
  t.equal(manyHeaders.json?.restate_code, 'KEEL0431');

  // A body past the discard bound (64 MiB) is not read to its end: the connection closes.
  const huge = await writeAllThenRead(keel.ingress, `POST /Echo/say HTTP/1.1\r\nhost: x\r\ncontent-length: ${1024 * MB}\r\n\r\n`, { body_bytes: 1024 * MB });
  t.ok(huge.closed, `a 1 GB body ends the connection (${huge.error ?? `status ${huge.status}`}) instead of being read to its end`);

  const after = await fetch(`${keel.ingress}/restate/health`);
  t.equal(after.status, 200, 'the server is fine');
});
