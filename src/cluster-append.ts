// Commands one node of a cluster hands to a partition another node leads (outbox entries: calls,
// sends and results between partitions), over the leader's admin API (`POST /cluster/append`,
// behind the admin token). Order matters: a partition drops an outbox entry at or below the last
// sequence it has from the entry's source, so an entry overtaken by a later one would be lost.
// Entries to one node therefore travel in one queue, one request at a time, and the leader
// appends a request's entries in order and stops at the first it cannot take: the answer says
// how many it took, and the rest are refused to their senders (whose Shuffles send them again).
import type { FastifyInstance } from 'fastify';
import type { Logger } from './common/logger.js';
import { assert } from './common/assert.js';
import { KeelError } from './errors/index.js';
import type { PartitionLeaders } from './forwarding.js';
import type { PeerClient } from './cluster-peers.js';
import { NODE_HEADERS, tokenMatcher } from './ingress/auth.js';
import { NotLedHereError } from './partition/errors.js';
import type { RemotePartitions, Worker } from './partition/worker.js';

/** Entries per request, and bytes: a backlog goes in a few requests, none of them huge. */
const MAX_BATCH_ENTRIES = 512;
const MAX_BATCH_BYTES = 4 * 1024 * 1024;
/** Entries waiting for one node; past it appends are refused (the Shuffles retry with backoff). */
const MAX_WAITING_ENTRIES = 16_384;
/** A request that gets no answer in this long fails (its entries are sent again). */
const REQUEST_TIMEOUT_MS = 10_000;

interface Pending {
  partition: number;
  command: Buffer;
  resolve: () => void;
  reject: (err: Error) => void;
}

interface NodeQueue {
  admin: string;
  waiting: Pending[];
  sending: boolean;
}

/** What `POST /cluster/append` answers: how many entries, from the first, were appended, and why the next was not. */
interface AppendAnswer {
  appended: number;
  refused?: { code: string; message: string };
}

export class RemoteAppender implements RemotePartitions {
  private readonly queues = new Map<string, NodeQueue>();

  constructor(
    private readonly leaders: PartitionLeaders,
    private readonly peers: PeerClient,
    /** Sent where the cluster has no token of its own. */
    private readonly admin_token: string | undefined,
    private readonly logger: Logger,
  ) {}

  leaderOf(partition: number): string | undefined {
    const leader = this.leaders.leaderOf(partition);
    return leader === undefined || leader === 'local' ? undefined : leader.node;
  }

  append(partition: number, command: Buffer): Promise<void> {
    const leader = this.leaders.leaderOf(partition);
    if (leader === undefined || leader === 'local') return Promise.reject(new NotLedHereError(partition));
    let queue = this.queues.get(leader.node);
    if (queue === undefined) {
      queue = { admin: leader.admin, waiting: [], sending: false };
      this.queues.set(leader.node, queue);
    }
    queue.admin = leader.admin; // a node restarted on another address
    if (queue.waiting.length >= MAX_WAITING_ENTRIES) return Promise.reject(new KeelError('KEEL0501', `${queue.waiting.length} commands wait to reach node ${leader.node}`));
    const q = queue;
    return new Promise((resolve, reject) => {
      q.waiting.push({ partition, command, resolve, reject });
      this.pump(q);
    });
  }

  private pump(queue: NodeQueue): void {
    if (queue.sending || queue.waiting.length === 0) return;
    let bytes = 0;
    let n = 0;
    while (n < queue.waiting.length && n < MAX_BATCH_ENTRIES && (n === 0 || bytes + queue.waiting[n]!.command.length <= MAX_BATCH_BYTES)) bytes += queue.waiting[n++]!.command.length;
    const batch = queue.waiting.splice(0, n);
    queue.sending = true;
    this.post(queue.admin, batch)
      .then(
        (answer) => {
          assert(answer.appended >= 0 && answer.appended <= batch.length, () => `node answered ${answer.appended} of ${batch.length} appended`);
          for (const p of batch.slice(0, answer.appended)) p.resolve();
          if (answer.appended === batch.length) return;
          const why = answer.refused === undefined ? new KeelError('KEEL0805', 'the leader took only part of the commands') : new KeelError('KEEL0805', `${answer.refused.code}: ${answer.refused.message}`);
          this.refuseFrom(queue, batch.slice(answer.appended), why);
        },
        (err: unknown) => this.refuseFrom(queue, batch, new KeelError('KEEL0805', `cannot hand commands to ${queue.admin}: ${(err as Error).message}`, undefined, { cause: err })),
      )
      .finally(() => {
        queue.sending = false;
        this.pump(queue);
      });
  }

  /**
   * Refuses `refused` and everything waiting behind it for the node: an entry after a refused one
   * must not arrive first (its target would then drop the refused one when it comes again). The
   * senders' Shuffles send them all again, in order, from the first refused.
   */
  private refuseFrom(queue: NodeQueue, refused: Pending[], why: Error): void {
    const waiting = queue.waiting.splice(0);
    for (const p of [...refused, ...waiting]) p.reject(why);
  }

  /**
   * One request. A request given up on (timed out) may still be appending there when the next
   * arrives: harmless, since each starts from the first entry refused to its senders and the
   * target drops what it already has from a source.
   */
  private async post(admin: string, batch: Pending[]): Promise<AppendAnswer> {
    const body = Buffer.from(JSON.stringify({ entries: batch.map((p) => ({ partition: p.partition, command: p.command.toString('base64') })) }));
    const headers = { 'content-type': 'application/json', ...(this.admin_token !== undefined ? { authorization: `Bearer ${this.admin_token}` } : {}) };
    try {
      const res = await this.peers.request(admin, '/cluster/append', 'POST', headers, body, { timeout_ms: REQUEST_TIMEOUT_MS });
      const text = res.body.toString('utf8');
      if (res.status !== 200) throw new Error(`answered ${res.status}: ${text.slice(0, 200)}`);
      return JSON.parse(text) as AppendAnswer;
    } catch (err) {
      this.logger.debug({ err, to: admin }, 'handing commands to another node failed; their senders retry');
      throw err;
    }
  }
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
    const appends: Promise<void>[] = [];
    let refused: Error | undefined;
    for (const e of entries) {
      const target = worker.processor(e.partition);
      let appended: Error | Promise<void>;
      try {
        appended = target === undefined ? new NotLedHereError(e.partition) : worker.appendEncoded(target, Buffer.from(e.command, 'base64'));
      } catch (err) {
        appended = new KeelError('KEEL0001', `entry ${appends.length} is not a command: ${(err as Error).message}`, 400);
      }
      if (appended instanceof Error) {
        refused = appended;
        break;
      }
      appends.push(appended);
    }
    const settled = await Promise.allSettled(appends);
    const failed = settled.findIndex((s) => s.status === 'rejected');
    const appended = failed === -1 ? appends.length : failed;
    if (failed !== -1) refused = (settled[failed] as PromiseRejectedResult).reason as Error;
    return { appended, ...(refused !== undefined ? { refused: { code: (refused as KeelError).code ?? 'RT0006', message: refused.message } } : {}) };
  });
}
