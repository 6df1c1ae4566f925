// Property tests (fast-check) of the HTTP edges of a running Keel: ingress paths, query strings,
// headers and bodies, admin routes and bodies, SQL text. Requests are written as raw bytes over
// TCP so that what a browser or fetch would refuse to send (bad percent-encoding, control
// characters, odd methods) reaches the server too. Whatever arrives, Keel answers in time,
// never with a 5xx, and every refusal carries a stable code; afterwards it still serves calls
// and has logged nothing at error level.
import t from 'tap';
import fc from 'fast-check';
import net from 'node:net';
import { startKeel, serveServices, register, ingress, query } from './helpers/keel.mjs';
import { bareGreeter } from './services/core-services.mjs';
import { listObj } from './services/object-services.mjs';
import { wf } from './services/workflow-services.mjs';

const CODE = /^(META|RT|KEEL)\d{4}$/;
const ANSWER_TIMEOUT_MS = 10_000;

/** One request as raw bytes on a fresh connection; resolves with { status, body } once the server closes. */
function rawRequest(base, head, body = Buffer.alloc(0)) {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    const chunks = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${ANSWER_TIMEOUT_MS} ms to ${JSON.stringify(head.slice(0, 300))}`));
    }, ANSWER_TIMEOUT_MS);
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(parseResponse(Buffer.concat(chunks)));
    });
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), body]));
  });
}

function parseResponse(bytes) {
  // An interim "100 Continue" (the client sent Expect: 100-continue) precedes the answer.
  const text = bytes.toString('utf8').replace(/^(HTTP\/1\.1 100 [^\r]*\r\n\r\n)+/, '');
  const end = text.indexOf('\r\n\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  const headers = text.slice(0, end).toLowerCase();
  let body = end < 0 ? '' : text.slice(end + 4);
  if (headers.includes('transfer-encoding: chunked')) body = unchunk(body);
  let json;
  try {
    json = JSON.parse(body);
  } catch {}
  return { status, body, json, raw: text.slice(0, 400), fromHandler: headers.includes('x-restate-error-source: invocation') };
}

function unchunk(s) {
  let out = '';
  for (let i = 0; i < s.length; ) {
    const nl = s.indexOf('\r\n', i);
    const n = parseInt(s.slice(i, nl), 16);
    if (!(n > 0)) break;
    out += s.slice(nl + 2, nl + 2 + n);
    i = nl + 4 + n;
  }
  return out;
}

function head(method, target, headers, bodyLength) {
  const lines = [`${method} ${target} HTTP/1.1`, 'host: 127.0.0.1', 'connection: close', ...headers.map(([k, v]) => `${k}: ${v}`)];
  if (bodyLength !== undefined) lines.push(`content-length: ${bodyLength}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** Text that tends to break parsers: percent signs, dots, slashes, control and non-ASCII characters. */
const nasty = fc.oneof(
  fc.constantFrom('', '%', '%ZZ', '%25', '%2F', '%E0%A4', '%25E0%25A4', '%00', '..', '.', '//', 'inv_1', 'a'.repeat(300), '%C0%AF', '\u00e9', '\u{1F600}', '?', '#', ';', '+'),
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 12 }),
);
/** As a request target carries it: bytes above 0x7f as UTF-8 percent-encoding or raw, never a space or CR LF (that is another request). */
const segment = nasty.map((s) => s.replace(/[\s\u0000-\u001f\u007f]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).replace(/[^\u0000-\u007f]/gu, (c) => [...Buffer.from(c)].map((b) => `%${b.toString(16)}`).join('')));
const delay = fc.oneof(fc.constantFrom('99999999999d', '1e30s', 'P99999999999999D', '-1s', 'NaN', '1ms', '0', 'PT1S', '10years', ''), fc.string({ maxLength: 12 }));
const query_ = fc.option(fc.tuple(fc.constantFrom('delay', 'idempotency-key', 'x', ''), delay).map(([k, v]) => `?${k}=${encodeURIComponent(v)}`), { nil: '' });
const headerValue = fc.string({ maxLength: 40 }).map((s) => s.replace(/[\r\n\u0000]/g, ''));
const headers = fc.array(
  fc.tuple(
    fc.oneof({ weight: 20, arbitrary: fc.constantFrom('content-type', 'idempotency-key', 'accept', 'x-restate-id', 'traceparent', 'authorization', 'x-random', 'content-encoding') }, { weight: 1, arbitrary: fc.constant('expect') }),
    fc.oneof(headerValue, fc.constantFrom('application/json', '100-continue', 'gzip', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')),
  ),
  { maxLength: 4 },
);
const body = fc.oneof(
  fc.string({ maxLength: 20 }).map((v) => Buffer.from(JSON.stringify(v))),
  fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v) ?? 'null')),
  fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
  fc.constant(Buffer.alloc(0)),
);

function checkAnswer(t, what, answer, tally) {
  // A handler's own failure (its TerminalError, or what the SDK made of a thrown error) is the
  // service's answer, passed through as Restate passes it: not Keel's to code.
  if (answer.fromHandler) {
    tally.handler = (tally.handler ?? 0) + 1;
    return true;
  }
  tally[answer.status] = (tally[answer.status] ?? 0) + 1;
  if (answer.status === 0 || answer.status >= 500) {
    t.fail(`${what} answered ${answer.status}: ${answer.raw}`);
    return false;
  }
  // A HEAD answer has no body to carry the code (HTTP says so); its status is still checked.
  if (answer.status >= 400 && !what.startsWith('HEAD ')) {
    const code = answer.json?.restate_code ?? answer.json?.code;
    if (typeof code !== 'string' || !CODE.test(code)) {
      t.fail(`${what} answered ${answer.status} without a stable code: ${answer.raw}`);
      return false;
    }
  }
  return true;
}

t.test('hostile HTTP at the ingress and the admin API: no 5xx, no stall, every refusal coded', async (t) => {
  const keel = await startKeel(t, {
    // A query time limit under ANSWER_TIMEOUT_MS: word salad can count range(1e12) (408 KEEL0021).
    env: { KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '2', KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'kill', KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '10ms', KEEL_ADMIN__QUERY_ENGINE__QUERY_TIMEOUT: '4s' },
  });
  const uri = await serveServices(t, [bareGreeter, listObj, wf]);
  const deployment = await register(keel, uri);
  const tally = { ingress: {}, admin: {}, sql: {} };
  let sent = 0;

  await t.test('ingress', async (t) => {
    const target = fc.tuple(
      // Real handlers that answer whatever they get (a workflow's run or a handler that fails the
      // SDK itself would wait, legitimately, for the inactivity timeout), and the rest of the API.
      fc.constantFrom('/BareGreeter/Greet', '/ListObj/k/items', '/ListObj/k/setMany', '/ListObj', '/Wf/k/peek', '/Wf/k/stage', '/restate/invocation', '/restate/awakeables', '/restate/workflow/Wf', '/restate', '', '/BareGreeter'),
      fc.array(segment, { maxLength: 3 }),
      fc.constantFrom('', '/send', '/attach', '/output', '/resolve', '/reject', '/cancel'),
      query_,
    ).map(([p, segs, tail, q]) => `${p}${segs.map((s) => `/${s}`).join('')}${tail}${q}` || '/');
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('POST', 'GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'FOO'), target, headers, body, async (method, path, hs, b) => {
        sent++;
        const answer = await rawRequest(keel.ingress, head(method, path, hs, b.length), b);
        return checkAnswer(t, `${method} ${path}`, answer, tally.ingress);
      }),
      { numRuns: 1500 },
    );
  });

  await t.test('admin', async (t) => {
    const route = fc.tuple(
      fc.constantFrom(
        '/deployments', `/deployments/${deployment.id}`, '/deployments/dp_x', '/services', '/services/ListObj', '/services/ListObj/state',
        '/services/BareGreeter/handlers/Greet', '/invocations', '/invocations/inv_1', '/invocations/inv_1/cancel', '/invocations/inv_1/kill',
        '/invocations/inv_1/purge', '/invocations/inv_1/restart-as-new', '/query', '/subscriptions', '/subscriptions/sub_x', '/v1/deployments',
        '/v3/services', '/health', '/openapi', '/partitions',
      ),
      fc.oneof({ weight: 3, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: fc.array(segment, { minLength: 1, maxLength: 2 }) }),
      fc.option(fc.constantFrom('?force=true', '?force=yes', '?dry_run=1', `?x=${'%ZZ'}`), { nil: '' }),
    ).map(([p, segs, q]) => `${p}${segs.map((s) => `/${s}`).join('')}${q}`);
    // Bodies shaped like the real ones, with fields of any type, as well as anything at all.
    const field = fc.oneof(fc.jsonValue({ maxDepth: 2 }), nasty, fc.constantFrom('http://127.0.0.1:1/', 'arn:aws:lambda:x', 'ftp://x', 'http://[::1', ''));
    const shaped = fc.record(
      { uri: field, arn: field, force: field, use_http_11: field, additional_headers: fc.oneof(field, fc.dictionary(nasty, headerValue, { maxKeys: 3 })), query: field, public: field, idempotency_retention: field, new_state: field, version: field, source: field, sink: field, options: field },
      { requiredKeys: [] },
    ).map((o) => Buffer.from(JSON.stringify(o)));
    const adminBody = fc.oneof(shaped, body);
    const adminHeaders = fc.constantFrom([['content-type', 'application/json']], [], [['content-type', 'text/plain']], [['content-type', 'application/json'], ['accept', 'application/vnd.apache.arrow.stream']]);
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('POST', 'GET', 'PUT', 'DELETE', 'PATCH'), route, adminHeaders, adminBody, async (method, path, hs, b) => {
        // Everything but removing the deployment the rest of the run calls.
        fc.pre(!(method === 'DELETE' && path.includes(deployment.id) && path.includes('force=true')));
        sent++;
        const answer = await rawRequest(keel.admin, head(method, path, hs, b.length), b);
        // An endpoint that cannot be reached is the one 5xx the admin API owes: 502 META0003.
        if (answer.status === 502 && answer.json?.restate_code === 'META0003') return true;
        return checkAnswer(t, `${method} ${path} ${b.toString().slice(0, 200)}`, answer, tally.admin);
      }),
      { numRuns: 1500 },
    );
  });

  await t.test('SQL', async (t) => {
    const word = fc.constantFrom(
      'SELECT', '*', 'FROM', 'sys_invocation', 'sys_service', 'sys_deployment', 'state', 'sys_journal', 'sys_inbox', 'WHERE', 'id', '=', "'x'", 'LIMIT',
      '1', '-1', '99999999999999999999', 'ORDER BY', 'GROUP BY', 'count(*)', 'JOIN', 'ON', 'UNION', ',', '(', ')', ';', 'NULL', 'DROP TABLE sys_invocation',
      'ATTACH', "read_csv('/etc/passwd')", 'COPY', 'INSERT INTO', 'VALUES', "'", '"', '--', '/*', 'pg_sleep(100)', 'range(1e12)',
    );
    // Well-formed queries over the real tables (with odd literals and limits) as well as word salad.
    const table = fc.constantFrom(['sys_invocation', ['id', 'target_service_name', 'status', 'created_at']], ['sys_service', ['name', 'ty']], ['sys_deployment', ['id', 'endpoint']], ['state', ['service_name', 'service_key', 'key']], ['sys_journal', ['id', 'index', 'entry_type']]);
    const literal = fc.oneof(fc.integer().map(String), fc.string({ maxLength: 12 }).map((v) => `'${v.replaceAll("'", "''")}'`), fc.constantFrom('NULL', "'inv_1'", '1e308', 'now()', "'2026-01-01'::timestamp"));
    const wellFormed = fc.tuple(table, fc.nat(3), fc.option(literal, { nil: undefined }), fc.option(fc.integer({ min: -5, max: 1_000_000_000 }), { nil: undefined }), fc.boolean()).map(([[name, cols], c, lit, limit, count]) => {
      const col = cols[c % cols.length];
      return `SELECT ${count ? `${col}, count(*) AS n` : cols.join(', ')} FROM ${name}${lit !== undefined ? ` WHERE ${col} = ${lit}` : ''}${count ? ` GROUP BY ${col}` : ''}${limit !== undefined ? ` LIMIT ${limit}` : ''}`;
    });
    const sql = fc.oneof(wellFormed, fc.array(word, { minLength: 1, maxLength: 12 }).map((w) => w.join(' ')), fc.string({ maxLength: 60 }));
    await fc.assert(
      fc.asyncProperty(sql, async (text) => {
        sent++;
        const b = Buffer.from(JSON.stringify({ query: text }));
        const answer = await rawRequest(keel.admin, head('POST', '/query', [['content-type', 'application/json'], ['accept', 'application/json']], b.length), b);
        return checkAnswer(t, `SQL ${text}`, answer, tally.sql);
      }),
      { numRuns: 800 },
    );
  });

  t.comment(`${sent} requests; statuses: ${JSON.stringify(tally)}`);
  // Still serving, and the tables still read.
  const greeting = await ingress(keel, '/BareGreeter/Greet', 'after');
  t.equal(greeting.status, 200, 'a call still succeeds');
  t.ok(Array.isArray(await query(keel, 'SELECT id, status FROM sys_invocation')), 'sys_invocation still reads');
  const errors = keel.output.split('\n').filter((l) => l.startsWith('{') && JSON.parse(l).level >= 50);
  t.same(errors.slice(0, 5), [], 'nothing logged at error level');
});
