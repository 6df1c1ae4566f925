// Commands one node of a cluster hands to a partition another node leads (outbox entries: calls,
// sends and results between partitions), over the leader's admin API (`POST /cluster/append`,
// behind the admin token): the BatchAppender's queue discipline (partition/batch-appender.ts),
// with HTTP as its transport.
import type { FastifyInstance } from 'fastify';
import type { Logger } from './common/logger.js';
import { KeelError } from './errors/index.js';
import type { PartitionLeaders } from './forwarding.js';
import type { PeerClient } from './cluster-peers.js';
import { NODE_HEADERS, tokenMatcher } from './ingress/auth.js';
import { appendBatch, BatchAppender, MAX_BATCH_ENTRIES, type AppendAnswer, type AppendEntry } from './partition/batch-appender.js';
import type { Worker } from './partition/worker.js';

/** A request that gets no answer in this long fails (its entries are sent again). */
const REQUEST_TIMEOUT_MS = 10_000;
/** A node refusing this one's cluster token is said at most this often (each retry meets it again). */
const REFUSED_TOKEN_WARN_MS = 30_000;

/** Entries for partitions other nodes lead, sent to each leader's admin API. */
export class RemoteAppender extends BatchAppender<string> {
  constructor(leaders: PartitionLeaders, peers: PeerClient, admin_token: string | undefined, logger: Logger) {
    const destinationOf = (partition: number) => {
      const leader = leaders.leaderOf(partition);
      return leader === undefined || leader === 'local' ? undefined : { name: leader.node, to: leader.admin };
    };
    // When each node that refused this one's cluster token was said to (by admin URL: one per node).
    const refusals = new Map<string, number>();
    super(destinationOf, (admin, entries) => post(peers, admin_token, logger, admin, entries, refusals));
  }
}

/**
 * One request. A request given up on (timed out) may still be appending there when the next
 * arrives: harmless, since each starts from the first entry refused to its senders and the
 * target drops what it already has from a source.
 */
async function post(peers: PeerClient, admin_token: string | undefined, logger: Logger, admin: string, entries: readonly AppendEntry[], refusals: Map<string, number>): Promise<AppendAnswer> {
  const body = Buffer.from(JSON.stringify({ entries: entries.map((p) => ({ partition: p.partition, command: p.command.toString('base64') })) }));
  const headers = { 'content-type': 'application/json', ...(admin_token !== undefined ? { authorization: `Bearer ${admin_token}` } : {}) };
  try {
    const res = await peers.request(admin, '/cluster/append', 'POST', headers, body, { timeout_ms: REQUEST_TIMEOUT_MS });
    const text = res.body.toString('utf8');
    if (res.status === 401) tokenRefused(logger, admin, text, refusals);
    if (res.status !== 200) throw new Error(`answered ${res.status}: ${text.slice(0, 200)}`);
    return JSON.parse(text) as AppendAnswer;
  } catch (err) {
    logger.debug({ err, to: admin }, 'handing commands to another node failed; their senders retry');
    throw err;
  }
}

/**
 * The other node does not take this one's cluster token: no passing failure, but the nodes'
 * cluster.auth_token differ, and every call, send and result between their partitions waits
 * (retried) until they agree. Only the refusing node said so before (debug here).
 */
function tokenRefused(logger: Logger, admin: string, answer: string, said: Map<string, number>): void {
  const now = performance.now();
  if (now - (said.get(admin) ?? -Infinity) < REFUSED_TOKEN_WARN_MS) return;
  said.set(admin, now);
  logger.warn({ code: 'KEEL0401', to: admin, answer: answer.slice(0, 200) }, `the node at ${admin} refuses this node's cluster token: cluster.auth_token differs between them, and calls, sends and results between their partitions wait until it is the same`);
}

/**
 * `POST /cluster/append`: appends the entries, in order, to the partitions this node leads, and
 * stops at the first it cannot take (not led here, refused); answers once those taken are durable.
 */
export function serveAppends(app: FastifyInstance, worker: Worker, cluster_tokens: readonly string[]): void {
  // Where the cluster has a token of its own, only the nodes append: an admin token is not enough.
  const fromNode = cluster_tokens.length === 0 ? () => true : tokenMatcher(cluster_tokens);
  app.post('/cluster/append', {
    onRequest: async (req) => {
      if (!fromNode(req.headers[NODE_HEADERS.token])) throw new KeelError('KEEL0401', `POST /cluster/append takes the cluster's own token (cluster.auth_token, in ${NODE_HEADERS.token}), which this request did not carry`);
    },
    schema: {
      body: {
        type: 'object', required: ['entries'], additionalProperties: false,
        properties: { entries: { type: 'array', maxItems: MAX_BATCH_ENTRIES, items: { type: 'object', required: ['partition', 'command'], additionalProperties: false, properties: { partition: { type: 'integer', minimum: 0 }, command: { type: 'string' } } } } },
      },
    },
  }, async (req) => {
    const { entries } = req.body as { entries: Array<{ partition: number; command: string }> };
    return appendBatch(worker, entries.map((e) => ({ partition: e.partition, command: Buffer.from(e.command, 'base64') })));
  });
}
