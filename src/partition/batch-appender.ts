// Outbox entries (calls, sends and results between partitions) handed to partitions open elsewhere:
// on another node of a cluster (over HTTP, cluster-append.ts), or — issue 23 — on another thread of
// this process. Order matters: a partition drops an outbox entry at or below the last sequence it
// has from the entry's source, so an entry overtaken by a later one would be lost. Entries to one
// destination therefore travel in one queue, one batch at a time; the destination appends a
// batch's entries in order and stops at the first it cannot take, answers how many it took, and
// the rest are refused to their senders (whose Shuffles send them again, in order).
import { KeelError } from '../errors/index.js';
import { NotLedHereError } from './errors.js';
import type { RemotePartitions, Worker } from './worker.js';

/** Entries per batch, and bytes: a backlog goes in a few batches, none of them huge. */
export const MAX_BATCH_ENTRIES = 512;
const MAX_BATCH_BYTES = 4 * 1024 * 1024;
/** Entries waiting for one destination; past it appends are refused (the Shuffles retry with backoff). */
const MAX_WAITING_ENTRIES = 16_384;

export interface AppendEntry {
  partition: number;
  command: Buffer;
}

/** How many entries, from the first, were appended, and why the next was not. */
export interface AppendAnswer {
  appended: number;
  refused?: { code: string; message: string };
}

/** Where a partition's entries go now (a node, a thread), with what the transport needs to reach it. */
export interface Destination<To> {
  name: string;
  to: To;
}

interface Pending extends AppendEntry {
  resolve: () => void;
  reject: (err: Error) => void;
}

interface Queue<To> {
  name: string;
  to: To;
  waiting: Pending[];
  sending: boolean;
}

export class BatchAppender<To> implements RemotePartitions {
  private readonly queues = new Map<string, Queue<To>>();

  constructor(
    /** The partition's destination now, or undefined while it is open here or led nowhere known. */
    private readonly destinationOf: (partition: number) => Destination<To> | undefined,
    /** Sends one batch; rejects when it did not arrive (all of it is then refused to its senders). */
    private readonly post: (to: To, entries: readonly AppendEntry[]) => Promise<AppendAnswer>,
  ) {}

  leaderOf(partition: number): string | undefined {
    return this.destinationOf(partition)?.name;
  }

  append(partition: number, command: Buffer): Promise<void> {
    const dest = this.destinationOf(partition);
    if (dest === undefined) return Promise.reject(new NotLedHereError(partition));
    let queue = this.queues.get(dest.name);
    if (queue === undefined) {
      queue = { name: dest.name, to: dest.to, waiting: [], sending: false };
      this.queues.set(dest.name, queue);
    }
    queue.to = dest.to; // a node restarted on another address
    if (queue.waiting.length >= MAX_WAITING_ENTRIES) return Promise.reject(new KeelError('KEEL0501', `${queue.waiting.length} commands wait to reach ${dest.name}`));
    const q = queue;
    return new Promise((resolve, reject) => {
      q.waiting.push({ partition, command, resolve, reject });
      this.pump(q);
    });
  }

  private pump(queue: Queue<To>): void {
    if (queue.sending || queue.waiting.length === 0) return;
    let bytes = 0;
    let n = 0;
    while (n < queue.waiting.length && n < MAX_BATCH_ENTRIES && (n === 0 || bytes + queue.waiting[n]!.command.length <= MAX_BATCH_BYTES)) bytes += queue.waiting[n++]!.command.length;
    const batch = queue.waiting.splice(0, n);
    queue.sending = true;
    // The transport gets the entries alone (a port cannot carry the promises' functions), and a
    // throw from it is a refusal like any other: the queue never stays stuck on `sending`.
    const entries = batch.map(({ partition, command }) => ({ partition, command }));
    Promise.resolve()
      .then(() => this.post(queue.to, entries))
      .then((answer) => {
        if (!(Number.isInteger(answer?.appended) && answer.appended >= 0 && answer.appended <= batch.length)) throw new Error(`${queue.name} answered ${answer?.appended} of ${batch.length} appended`);
        for (const p of batch.slice(0, answer.appended)) p.resolve();
        if (answer.appended === batch.length) return;
        const why = answer.refused === undefined ? new KeelError('KEEL0805', `${queue.name} took only part of the commands`) : new KeelError('KEEL0805', `${answer.refused.code}: ${answer.refused.message}`);
        this.refuseFrom(queue, batch.slice(answer.appended), why);
      })
      .catch((err: unknown) => this.refuseFrom(queue, batch, new KeelError('KEEL0805', `cannot hand commands to ${queue.name}: ${(err as Error).message}`, { cause: err })))
      .finally(() => {
        queue.sending = false;
        this.pump(queue);
      });
  }

  /**
   * Refuses `refused` and everything waiting behind it for the destination: an entry after a
   * refused one must not arrive first (its target would then drop the refused one when it comes
   * again). The senders' Shuffles send them all again, in order, from the first refused.
   */
  private refuseFrom(queue: Queue<To>, refused: Pending[], why: Error): void {
    const waiting = queue.waiting.splice(0);
    for (const p of [...refused, ...waiting]) p.reject(why);
  }
}

/**
 * The destination's half: appends the entries, in order, to the partitions open here, stops at
 * the first it cannot take (not open here, refused, not a command), and answers once those taken
 * are durable.
 */
export async function appendBatch(worker: Worker, entries: readonly AppendEntry[]): Promise<AppendAnswer> {
  const appends: Promise<void>[] = [];
  let refused: Error | undefined;
  for (const e of entries) {
    const target = worker.processor(e.partition);
    let appended: Error | Promise<void>;
    try {
      appended = target === undefined ? new NotLedHereError(e.partition) : worker.appendEncoded(target, e.command);
    } catch (err) {
      appended = new KeelError('KEEL0001', `entry ${appends.length} is not a command: ${(err as Error).message}`);
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
}
