// Requests a node cannot serve itself go to the node that can, and the answer comes back as it
// is. With one node leading every partition, a standby forwards every request to it as it came
// (method, path, headers, body streamed); only what is about the node itself is answered where it
// is asked (health, metrics, GET /cluster, the UI's files). With the partitions spread, each node
// serves what it can and a request that needs a partition another node leads (its handler threw
// NotLedHereError before it changed anything) goes to that partition's leader, its parsed body
// sent again. A request already forwarded once is not forwarded again (no loops while the nodes
// disagree about who leads what for a moment): it is answered 503, as when no node leads.
import type http from 'node:http';
import http2 from 'node:http2';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from './common/logger.js';
import { catalogue, KeelError, type ErrorCode } from './errors/index.js';
import type { PgQueries } from './admin/pgwire.js';
import { PG_ANSWER_TYPE } from './admin/routes/query.js';
import { abandoned, queryFailure } from './admin/query/protocol.js';
import type { PeerClient, PeerResponse } from './cluster-peers.js';
import { NODE_HEADERS, NODE_HEADER_NAMES } from './ingress/auth.js';

/** A standby's SQL waits this long for the active node's rows (the query engine bounds its own work first). */
const PG_QUERY_TIMEOUT_MS = 300_000;

/** Answered by the node asked, never forwarded. */
const LOCAL_PATH = /^(?:\/v\d+)?\/health$|^\/metrics$|^\/cluster$|^\/ui(?:\/.*)?$|^\/$/;
/** Headers of one connection, not of the request (RFC 9110, 7.6.1; RFC 9113, 8.2.2); `host` becomes `:authority`. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'host', 'http2-settings']);

/** Where requests go now: 'local' (this node serves them), a base URL, or undefined (no node is active). */
export type Route = () => 'local' | string | undefined;

/** One warning per this long about the active node being unreachable (a failover fails every request meanwhile). */
const WARN_INTERVAL_MS = 5_000;
let lastWarning_ms = 0;

export function forwardWhenStandby(app: FastifyInstance, route: Route, peers: PeerClient, logger: Logger): void {
  app.addHook('onRequest', async (request, reply) => {
    const path = request.url.split('?')[0]!;
    // Only an origin-form target goes on (an absolute URL is answered here, as any unknown path).
    if (LOCAL_PATH.test(path) || !path.startsWith('/')) return;
    const to = route();
    if (to === 'local') return;
    if (to === undefined || request.headers[NODE_HEADERS.forwarded_by] !== undefined) {
      const entry = catalogue.get('KEEL0803')!;
      reply.code(entry.status).header('retry-after', '1');
      return reply.send({ code: 'KEEL0803', message: `no node of the cluster is active yet (asked: ${peers.node}); retry in a moment` });
    }
    reply.hijack();
    forward(request.raw, reply.raw, to, peers, logger);
  });
}

/** How long a request whose partition has no leader now (one is taking it over) waits for one. */
const LEADER_WAIT_MS = 10_000;
const LEADER_POLL_MS = 50;
/** Forwards a request may take while the nodes' views of who leads what converge. */
const MAX_HOPS = 3;

/** The partition's leader, waiting up to LEADER_WAIT_MS while none is known (a node is taking it over). */
async function leaderFor(partition: number, leaders: PartitionLeaders): Promise<NodeAddress | undefined> {
  const deadline = performance.now() + LEADER_WAIT_MS;
  for (;;) {
    const leader = leaders.leaderOf(partition);
    // Open here by now (it was being taken over when the handler asked): the request goes round again.
    if (leader === 'local') return leaders.self;
    if (leader !== undefined || performance.now() >= deadline) return leader;
    await new Promise((r) => setTimeout(r, LEADER_POLL_MS));
  }
}

/**
 * With the partitions spread: sends a request whose handler needs `partition`, led elsewhere, to
 * its leader (`server`: the leader's ingress or admin), with the body as this node parsed it.
 */
export async function forwardToLeader(req: FastifyRequest, reply: FastifyReply, partition: number, leaders: PartitionLeaders, peers: PeerClient, server: 'ingress' | 'admin', logger: Logger): Promise<void> {
  const hops = Number(req.headers[NODE_HEADERS.hops] ?? 0) || 0;
  const leader = hops >= MAX_HOPS ? undefined : await leaderFor(partition, leaders);
  if (leader === undefined) return notLed(reply, partition, server, leaders.self.node, hops);
  const raw = req.body;
  const body = raw === undefined || raw === null ? Buffer.alloc(0) : Buffer.isBuffer(raw) ? raw : Buffer.from(typeof raw === 'string' ? raw : JSON.stringify(raw));
  reply.hijack();
  forward(req.raw, reply.raw, leader[server], peers, logger, { body, url: req.url, hops: hops + 1 });
}

/**
 * A call accepted here whose partition moved to another node while its client waited: the client
 * gets the result from the new leader, as `GET /restate/invocation/{id}/attach` answers it there
 * (never the call again: it would run twice).
 */
export async function attachAtLeader(req: FastifyRequest, reply: FastifyReply, partition: number, invocation: string, leaders: PartitionLeaders, peers: PeerClient, logger: Logger): Promise<void> {
  const leader = await leaderFor(partition, leaders);
  if (leader === undefined) return notLed(reply, partition, 'ingress', leaders.self.node, 0);
  reply.hijack();
  forward(req.raw, reply.raw, leader.ingress, peers, logger, { body: Buffer.alloc(0), url: `/restate/invocation/${encodeURIComponent(invocation)}/attach`, method: 'GET', hops: 1 });
}

function notLed(reply: FastifyReply, partition: number, server: 'ingress' | 'admin', node: string, hops: number): void {
  const entry = catalogue.get('KEEL0805')!;
  const message = hops >= MAX_HOPS ? `partition ${partition}: the request went round ${hops} nodes without finding its leader (asked: ${node}); retry in a moment` : `partition ${partition} has had no leader for ${LEADER_WAIT_MS / 1000} s (asked: ${node}); retry in a moment`;
  void reply.code(entry.status).header('retry-after', '1').send(server === 'admin' ? { message: `[KEEL0805] ${message}`, restate_code: 'KEEL0805' } : { code: 'KEEL0805', message });
}

/** A node's name and the base URLs of its servers. */
interface NodeAddress {
  node: string;
  ingress: string;
  admin: string;
}

/** Who leads each partition (cluster-node.ts). */
export interface PartitionLeaders {
  readonly self: NodeAddress;
  leaderOf(partition: number): 'local' | NodeAddress | undefined;
}

/**
 * Sends the request to `base` over the node's HTTP/2 session to it and relays the answer as it
 * comes. `body`: the request's body as parsed here (the stream is read), sent instead of the
 * stream; `url`, `method`: the request to make there, when not the one that came.
 */
function forward(req: http.IncomingMessage, res: http.ServerResponse, base: string, peers: PeerClient, logger: Logger, instead: { body?: Buffer; url?: string; method?: string; hops?: number } = {}): void {
  const { body, url = req.url ?? '/', method = req.method ?? 'GET' } = instead;
  const headers: http2.OutgoingHttpHeaders = {};
  // A request that arrived over HTTP/2 keeps its fields, not its pseudo-header fields; what a
  // client sent as if it were a node goes no further.
  for (const [name, value] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(name) && !NODE_HEADER_NAMES.includes(name) && !name.startsWith(':') && value !== undefined) headers[name] = value;
  if (body !== undefined) headers['content-length'] = String(body.length);
  if (instead.hops !== undefined) headers[NODE_HEADERS.hops] = String(instead.hops);
  const origin = new URL(base).origin;
  let settled = false;
  const failed = (err: Error): void => {
    if (settled || res.destroyed) return; // answered already, or the client went away
    settled = true;
    if (Date.now() - lastWarning_ms >= WARN_INTERVAL_MS) {
      lastWarning_ms = Date.now();
      logger.warn({ err, code: 'KEEL0803', to: origin }, 'forwarding requests to the active node fails; answering 503 until another is active');
    }
    if (res.headersSent) return void res.destroy();
    res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
    res.end(JSON.stringify({ code: 'KEEL0803', message: `the active node (${origin}) cannot be reached from ${peers.node}: ${err.message}; retry in a moment` }));
  };
  let upstream: http2.ClientHttp2Stream;
  try {
    // The path as it came (an absolute-form target or `//host/...` is not resolved into another host).
    upstream = peers.open(base, url, method, headers);
  } catch (err) {
    return failed(err as Error);
  }
  upstream.on('response', (answer) => {
    if (settled || res.destroyed) return;
    settled = true;
    const out: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(answer)) if (!name.startsWith(':') && !HOP_BY_HOP.has(name) && value !== undefined) out[name] = value;
    res.writeHead(Number(answer[':status'] ?? 502), out);
    upstream.pipe(res);
  });
  upstream.on('error', failed);
  // Reset by the peer (no error event): before an answer the client is told; during one, cut off.
  upstream.on('close', () => {
    if (!res.headersSent) failed(new Error(`the request was reset (HTTP/2 code ${upstream.rstCode})`));
    else if (!res.writableEnded) res.destroy();
  });
  if (body !== undefined) upstream.end(body);
  else req.pipe(upstream);
  res.on('close', () => {
    if (!res.writableFinished && !upstream.closed) upstream.close(http2.constants.NGHTTP2_CANCEL);
  });
}

/**
 * The SQL of a standby's pg clients (9071), answered by the active node: its admin API runs the
 * query and sends the rows as the wire protocol carries them, which this node relays. The
 * client authenticated here; the active node is asked with this node's admin token.
 */
export function routePgQueries(engine: PgQueries, route: Route, peers: PeerClient, admin_token: string | undefined): PgQueries {
  const node = peers.node;
  return {
    async query(sql, format, opts = {}) {
      const to = route();
      if (to === 'local') return engine.query(sql, format, opts);
      if (to === undefined) throw new KeelError('KEEL0803', `no node of the cluster is active yet (asked: ${node}); retry in a moment`);
      let res: PeerResponse;
      try {
        const headers = { 'content-type': 'application/json', accept: PG_ANSWER_TYPE, ...(admin_token !== undefined ? { authorization: `Bearer ${admin_token}` } : {}) };
        const body = Buffer.from(JSON.stringify({ query: sql, ...(opts.params !== undefined ? { params: opts.params } : {}) }));
        res = await peers.request(to, '/query', 'POST', headers, body, { timeout_ms: PG_QUERY_TIMEOUT_MS, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
      } catch (err) {
        // Cancelled by its client (a pg cancel request, a closed connection): not the peer's fault.
        if (opts.signal?.aborted === true) throw queryFailure(abandoned(opts.signal.reason));
        throw new KeelError('KEEL0803', `the active node (${new URL(to).origin}) cannot be reached from ${node}: ${(err as Error).message}; retry in a moment`, { cause: err });
      }
      if (res.status !== 200) throw refusal(res.status, res.body.toString('utf8'));
      const bytes = new Uint8Array(res.body.buffer, res.body.byteOffset, res.body.length);
      const headBytes = Number(res.headers['x-keel-head-bytes'] ?? 0);
      const rest = bytes.subarray(headBytes);
      return {
        rows: Number(res.headers['x-keel-rows'] ?? 0),
        ...(headBytes > 0 ? { head: bytes.subarray(0, headBytes) } : {}),
        body: (async function* () {
          if (rest.length > 0) yield rest;
        })(),
      };
    },
  };
}

/** The active node's error answer as the error it was there (its code, so pg clients get the same SQLSTATE). */
function refusal(status: number, text: string): KeelError {
  let code: string | undefined;
  let message = text;
  try {
    const body = JSON.parse(text) as { restate_code?: string; code?: unknown; message?: string };
    code = body.restate_code ?? (typeof body.code === 'string' ? body.code : undefined);
    message = (body.message ?? text).replace(/^\[[A-Z]+[0-9]+\] /, '');
  } catch {
    // not JSON: a proxy's page; said as it came
  }
  return code !== undefined && catalogue.has(code) ? new KeelError(code as ErrorCode, message, { relayed: status }) : new KeelError('KEEL0803', `the active node answered ${status}: ${message}`);
}
