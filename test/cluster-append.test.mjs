// Commands handed to a partition another node leads (src/cluster-append.ts), against a real HTTP
// server playing the leader's POST /cluster/append: one request in flight per node, and after a
// refusal nothing queued behind the refused entry goes out first (its target would then drop the
// refused one when it is sent again).
import t from 'tap';
import http2 from 'node:http2';
import { RemoteAppender } from '../dist/cluster-append.js';
import { PeerClient } from '../dist/cluster-peers.js';
import { silentLogger } from '../dist/common/logger.js';

/** A leader whose answers the test scripts: each request's entries are recorded; `answer(entries)` says how many it took. */
async function leader(t, answer) {
  const requests = [];
  // HTTP/2 only, as the nodes speak to each other.
  const server = http2.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      const { entries } = JSON.parse(body);
      const seen = entries.map((e) => Buffer.from(e.command, 'base64').toString());
      requests.push(seen);
      const reply = await answer(seen, requests.length);
      res.writeHead(reply.status ?? 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(reply.body));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const admin = `http://127.0.0.1:${server.address().port}`;
  const leaders = { self: { node: 'me', ingress: '', admin: '' }, leaderOf: () => ({ node: 'x', ingress: '', admin }) };
  const peers = new PeerClient('me', undefined);
  t.teardown(() => peers.close());
  return { requests, appender: new RemoteAppender(leaders, peers, undefined, silentLogger) };
}

const settle = (p) => p.then(() => 'ok', (err) => `refused: ${err.code}`);

t.test('one request in flight per node: what comes meanwhile goes in the next, in order', async (t) => {
  let release;
  const first = new Promise((r) => (release = r));
  const { requests, appender } = await leader(t, async (seen, n) => {
    if (n === 1) await first;
    return { body: { appended: seen.length } };
  });
  const sent = ['e1', 'e2', 'e3', 'e4'].map((e) => appender.append(0, Buffer.from(e)));
  await new Promise((r) => setTimeout(r, 100));
  t.same(requests, [['e1']], 'the first entry goes at once, alone; the rest wait for its answer');
  release();
  t.same(await Promise.all(sent.map(settle)), ['ok', 'ok', 'ok', 'ok']);
  t.same(requests, [['e1'], ['e2', 'e3', 'e4']], 'then the rest together, in order');
});

t.test('a refusal refuses everything queued behind it for the node: nothing after it arrives first', async (t) => {
  let release;
  const first = new Promise((r) => (release = r));
  const { requests, appender } = await leader(t, async (seen, n) => {
    if (n === 1) {
      await first;
      return { body: { appended: 0, refused: { code: 'KEEL0501', message: 'busy' } } };
    }
    return { body: { appended: seen.length } };
  });
  const a = appender.append(0, Buffer.from('a1'));
  await new Promise((r) => setTimeout(r, 50));
  // While a1 is on its way, three more queue.
  const queued = ['a2', 'a3', 'a4'].map((e) => appender.append(1, Buffer.from(e)));
  release();
  t.equal(await settle(a), 'refused: KEEL0805', 'the refused entry');
  t.same(await Promise.all(queued.map(settle)), ['refused: KEEL0805', 'refused: KEEL0805', 'refused: KEEL0805'], 'and every entry queued behind it, unsent');
  t.same(requests, [['a1']], 'none of them went out');
  t.equal(await settle(appender.append(0, Buffer.from('a1-again'))), 'ok', 'sent again, they go');

  const partly = await leader(t, async (seen) => ({ body: { appended: seen.length - 1, refused: { code: 'KEEL0805', message: 'not led here' } } }));
  const two = ['b1', 'b2'].map((e) => partly.appender.append(0, Buffer.from(e)));
  t.same(await Promise.all(two.map(settle)), ['refused: KEEL0805', 'refused: KEEL0805'], 'b1 alone in the first request: not taken');
});

t.test('a leader that cannot be reached, or answers an error: every entry refused, none lost silently', async (t) => {
  const { appender } = await leader(t, async () => ({ status: 500, body: { message: 'boom' } }));
  t.same(await Promise.all(['c1', 'c2'].map((e) => settle(appender.append(0, Buffer.from(e))))), ['refused: KEEL0805', 'refused: KEEL0805']);
  const peers = new PeerClient('me', undefined);
  t.teardown(() => peers.close());
  const nowhere = new RemoteAppender({ self: { node: 'me', ingress: '', admin: '' }, leaderOf: () => ({ node: 'y', ingress: '', admin: 'http://127.0.0.1:1' }) }, peers, undefined, silentLogger);
  t.equal(await settle(nowhere.append(0, Buffer.from('d1'))), 'refused: KEEL0805', 'connection refused');
  const none = new RemoteAppender({ self: { node: 'me', ingress: '', admin: '' }, leaderOf: () => undefined }, peers, undefined, silentLogger);
  t.equal(await settle(none.append(3, Buffer.from('e1'))), 'refused: KEEL0805', 'no leader known');
});

t.test('the entries waiting for one node are bounded: past 16,384 appends are refused (KEEL0501) at once; a backlog goes in requests of at most 512', async (t) => {
  let release;
  const first = new Promise((r) => (release = r));
  const { requests, appender } = await leader(t, async (seen, n) => {
    if (n === 1) await first;
    return { body: { appended: seen.length } };
  });
  const sent = [appender.append(0, Buffer.from('first'))];
  await new Promise((r) => setTimeout(r, 50));
  for (let i = 0; i < 16_384; i++) sent.push(appender.append(i % 4, Buffer.from(`w${i}`)));
  const over = await settle(appender.append(0, Buffer.from('one too many')));
  t.equal(over, 'refused: KEEL0501', 'the 16,385th waiting entry is refused: the sender backs off and sends it again');
  release();
  const settled = await Promise.all(sent.map(settle));
  t.ok(settled.every((s) => s === 'ok'), `every entry within the bound appended (${settled.length})`);
  const sizes = requests.map((r) => r.length);
  t.same(sizes, [1, ...Array(32).fill(512)], 'the backlog in 32 requests of 512, in order');
  t.same(requests.slice(1).flat(), Array.from({ length: 16_384 }, (_, i) => `w${i}`), 'in the order they came');
});
