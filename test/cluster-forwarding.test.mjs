// A request whose partition another node of a cluster leads (src/forwarding.ts), against real
// HTTP servers: one playing the node asked (its handler needs partition 0), one playing the
// leader, which echoes what reached it and serves HTTP/2 only (the nodes speak HTTP/2 to each
// other). The request goes to the leader with the body as it was parsed, its hop count and the
// cluster's token; a partition without a leader is waited for, then refused with KEEL0805; a
// request that has gone round too many nodes is refused at once.
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import Fastify from 'fastify';
import { attachAtLeader, forwardToLeader, forwardWhenStandby } from '../dist/forwarding.js';
import { PeerClient } from '../dist/cluster-peers.js';
import { silentLogger } from '../dist/common/logger.js';

/** A leader that answers every request, over HTTP/2 only, with what reached it. */
async function echoLeader(t) {
  const seen = [];
  const server = http2.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const got = { method: req.method, url: req.url, hops: req.headers['x-keel-hops'], by: req.headers['x-keel-forwarded-by'], authorization: req.headers.authorization, cluster: req.headers['x-keel-cluster-token'], body };
      seen.push(got);
      res.writeHead(201, { 'content-type': 'application/json', 'x-from': 'leader' });
      res.end(JSON.stringify(got));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const url = `http://127.0.0.1:${server.address().port}`;
  return { seen, address: { node: 'leader', ingress: url, admin: url } };
}

/** The node asked: POST /call/:partition needs that partition; GET /wait/:id waits for an invocation that moved. */
async function askedNode(t, leaders, token) {
  const app = Fastify();
  const peers = new PeerClient('asked', token);
  app.post('/call/:partition', async (req, reply) => {
    await forwardToLeader(req, reply, Number(req.params.partition), leaders, peers, 'ingress', silentLogger);
    return reply;
  });
  app.post('/admin/:partition', async (req, reply) => {
    await forwardToLeader(req, reply, Number(req.params.partition), leaders, peers, 'admin', silentLogger);
    return reply;
  });
  app.post('/wait/:id', async (req, reply) => {
    await attachAtLeader(req, reply, 0, req.params.id, leaders, peers, silentLogger);
    return reply;
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  t.teardown(() => peers.close());
  return `http://127.0.0.1:${app.server.address().port}`;
}

const self = { node: 'asked', ingress: 'http://127.0.0.1:1', admin: 'http://127.0.0.1:1' };
const post = (url, body, headers = {}) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

t.test('a request for a partition led elsewhere reaches the leader over HTTP/2 with its parsed body and one more hop; the answer comes back as it was', async (t) => {
  const leader = await echoLeader(t);
  const asked = await askedNode(t, { self, leaderOf: () => leader.address });
  const res = await post(`${asked}/call/0?x=1`, { name: 'Ada' }, { 'idempotency-key': 'k1', authorization: 'Bearer client' });
  t.equal(res.status, 201, "the leader's status");
  t.equal(res.headers.get('x-from'), 'leader', "and its headers");
  t.same(await res.json(), { method: 'POST', url: '/call/0?x=1', hops: '1', by: 'asked', authorization: 'Bearer client', body: '{"name":"Ada"}' }, "without a cluster token, the client's goes on");
  const again = await post(`${asked}/call/0`, 7, { 'x-keel-hops': '2' });
  t.equal((await again.json()).hops, '3', 'a request forwarded before counts on from its hops');
  const many = await Promise.all(Array.from({ length: 50 }, (_, i) => post(`${asked}/call/0`, i).then((r) => r.json())));
  t.same(many.map((m) => m.body), Array.from({ length: 50 }, (_, i) => String(i)), 'fifty at once on one session, each answered with its own');
});

t.test("with a cluster token, the leader gets it in a header of its own; the client's goes on as it came", async (t) => {
  const leader = await echoLeader(t);
  const asked = await askedNode(t, { self, leaderOf: () => leader.address }, 'cluster-secret');
  const res = await post(`${asked}/call/0`, 1, { authorization: 'Bearer client', 'x-keel-cluster-token': 'forged', 'x-keel-hops': '0' });
  t.match(await res.json(), { authorization: 'Bearer client', cluster: 'cluster-secret', hops: '1' }, "what a client sent as a node's is replaced");
  const open = await askedNode(t, { self, leaderOf: () => leader.address });
  const bare = await (await post(`${open}/call/0`, 1, { 'x-keel-cluster-token': 'forged' })).json();
  t.equal(bare.cluster, undefined, 'without a cluster token, a forged one goes no further');
});

t.test('a standby forwards the request target as it came: `//host/...` or an absolute URL never sends it (or the token) to another host', async (t) => {
  const leader = await echoLeader(t);
  const app = Fastify();
  const peers = new PeerClient('standby', 'cluster-secret');
  forwardWhenStandby(app, () => leader.address.ingress, peers, silentLogger);
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  t.teardown(() => peers.close());
  const raw = (target) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: app.server.address().port, method: 'POST', path: target, headers: { 'content-type': 'text/plain' } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end('x');
  });
  const slashes = await raw('//evil.example:9/Greeter/greet');
  t.same([slashes.status, JSON.parse(slashes.body).url], [201, '//evil.example:9/Greeter/greet'], 'the leader got it, with the path as it came');
  const absolute = await raw('http://evil.example:9/Greeter/greet');
  t.equal(absolute.status, 404, 'an absolute-form target is not forwarded at all: answered where it was asked');
  t.equal(leader.seen.length, 1, 'only the first reached the leader');
});

t.test('a whole answer or none: a peer that dies mid-answer, or never answers, fails the request', async (t) => {
  const server = http2.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"appended":1}');
    setTimeout(() => res.stream.session.destroy(), 50);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const peers = new PeerClient('me', undefined);
  t.teardown(() => peers.close());
  const cut = await peers.request(`http://127.0.0.1:${server.address().port}`, '/x', 'POST', {}, Buffer.from('{}'), { timeout_ms: 5_000 }).then(() => 'resolved', (err) => err.message);
  t.match(cut, /cut off/, `an answer whose stream was reset is no answer, though what came parses (${cut})`);
  const silent = net.createServer(() => {});
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  t.teardown(() => silent.close());
  const started = performance.now();
  const none = await peers.request(`http://127.0.0.1:${silent.address().port}`, '/x', 'POST', {}, Buffer.alloc(0), { timeout_ms: 300 }).then(() => 'resolved', (err) => err.message);
  t.match(none, /no answer in 300 ms/);
  t.ok(performance.now() - started < 2_000, 'in time');
});

t.test('a request that has gone round as many nodes as allowed is refused at once: KEEL0805, retry-after', async (t) => {
  const leader = await echoLeader(t);
  const asked = await askedNode(t, { self, leaderOf: () => leader.address });
  const started = performance.now();
  const res = await post(`${asked}/call/3`, {}, { 'x-keel-hops': '3' });
  t.equal(res.status, 503);
  t.equal(res.headers.get('retry-after'), '1');
  const body = await res.json();
  t.equal(body.code, 'KEEL0805');
  t.match(body.message, /partition 3: the request went round 3 nodes without finding its leader \(asked: asked\)/);
  t.ok(performance.now() - started < 1_000, 'without waiting for a leader');
  t.same(leader.seen, [], 'nothing reached the leader');
  const admin = await post(`${asked}/admin/3`, {}, { 'x-keel-hops': '5' });
  t.same([admin.status, (await admin.json()).restate_code], [503, 'KEEL0805'], 'the admin API says so in its own shape');
});

t.test('a partition being taken over is waited for: the request goes to its leader once there is one', async (t) => {
  const leader = await echoLeader(t);
  let known;
  const asked = await askedNode(t, { self, leaderOf: () => known });
  setTimeout(() => (known = leader.address), 600);
  const started = performance.now();
  const res = await post(`${asked}/call/1`, 'hello');
  t.equal(res.status, 201, 'answered by the new leader');
  const waited = performance.now() - started;
  t.ok(waited >= 550 && waited < 5_000, `after waiting for it (${waited.toFixed(0)} ms)`);
  t.equal(leader.seen.length, 1);
});

t.test('a partition with no leader for 10 s: KEEL0805, naming the partition and the node asked', async (t) => {
  const asked = await askedNode(t, { self, leaderOf: () => undefined });
  const started = performance.now();
  const res = await post(`${asked}/call/2`, {});
  const waited = performance.now() - started;
  t.equal(res.status, 503);
  t.match(await res.json(), { code: 'KEEL0805', message: 'partition 2 has had no leader for 10 s (asked: asked); retry in a moment' });
  t.ok(waited >= 9_900 && waited < 15_000, `after 10 s (${waited.toFixed(0)} ms)`);
});

t.test('a partition this node has just taken over: the request goes round again, here', async (t) => {
  const local = await echoLeader(t);
  let led = 'remote-unknown';
  const asked = await askedNode(t, { self: local.address, leaderOf: () => (led === 'remote-unknown' ? undefined : 'local') });
  setTimeout(() => (led = 'local'), 200);
  const res = await post(`${asked}/call/0`, 1);
  t.equal(res.status, 201);
  t.equal((await res.json()).hops, '1', "sent to this node's own address, once");
});

t.test('a leader that cannot be reached: 503 KEEL0803, the client retries', async (t) => {
  const asked = await askedNode(t, { self, leaderOf: () => ({ node: 'gone', ingress: 'http://127.0.0.1:1', admin: 'http://127.0.0.1:1' }) });
  const res = await post(`${asked}/call/0`, {});
  t.equal(res.status, 503);
  const body = await res.json();
  t.equal(body.code, 'KEEL0803');
  t.match(body.message, /http:\/\/127\.0\.0\.1:1\) cannot be reached from asked/);
});

t.test('a call whose partition moved while its client waited: the client gets it by an attach at the new leader, never the call again', async (t) => {
  const leader = await echoLeader(t);
  const asked = await askedNode(t, { self, leaderOf: () => leader.address });
  const res = await post(`${asked}/wait/inv_1abc`, { the: 'call' });
  t.same(await res.json(), { method: 'GET', url: '/restate/invocation/inv_1abc/attach', hops: '1', by: 'asked', body: '' });
});
