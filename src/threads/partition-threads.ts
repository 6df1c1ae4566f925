// The main thread's side of worker.threads > 1 (issue 23): starts the partition threads (thread.ts)
// over contiguous ranges of partitions, wires the mesh of ports between them, hands each the schema
// registry's records, and answers for them: the edge's requests (PartitionGateway), the rule books,
// the partitions' failures and the metric cells. Admin reads go through ThreadedIntrospection.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker as Thread, type MessagePort } from 'node:worker_threads';
import { assert } from '../common/assert.js';
import type { Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { partitionIndexOf, randomKeyOfPartition, type InvocationId } from '../common/ids.js';
import type { RuleBook } from '../common/limit-rules.js';
import type { InvocationChanges } from '../admin/introspection.js';
import { encodeCommand, type Command, type CommandKind } from '../log/commands.js';
import type { Registry } from '../metadata/registry.js';
import { decodeChanges, decodeOutcome, encodeInvokeRequest, FrameBatcher, framesOf } from '../partition/frames.js';
import type { InvokeOutcome, InvokeRequest, OutputOutcome, PartitionGateway } from '../partition/gateway.js';
import type { PartitionFailure } from '../partition/processor.js';
import type { InvocationStatus } from '../partition/state.js';
import { invocationsTable } from '../storage/tables/invocations.js';
import { sharedSlotsMemory } from '../invoker/deployment-slots.js';
import type { CollectedMetric } from '../telemetry/cells.js';
import { errorOf, errorShape, revive, type CallName, type FromThread, type StreamName, type ToThread } from './messages.js';
import { SubscriptionMirror, threadedPartitions } from './subscription-mirror.js';
import type { SubscriptionPartitions } from '../subscriptions/partitions.js';
import type { ThreadData } from './thread.js';

/** The thread's entry: bundled beside the server's bundle (dist/bundle/thread.cjs), or compiled beside this file. */
function threadMainPath(): string {
  for (const candidate of ['./thread.cjs', './thread.js']) {
    const path = fileURLToPath(new URL(candidate, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error(`threads/thread.js is not found from ${fileURLToPath(import.meta.url)}: run npm run build`);
}

interface Pending {
  /** The thread asked: its end settles what it left unanswered. */
  thread: number;
  resolve: (v: unknown) => void;
  reject: (err: Error) => void;
}

/** One partition thread as the main thread holds it. */
interface Handle {
  readonly index: number;
  readonly thread: Thread;
  readonly frames: FrameBatcher;
  /** Its partitions, in order. */
  readonly partitions: readonly number[];
  /** Requests sent to it and not answered yet: a plain service's call goes where fewer wait. */
  inFlight: number;
  failures: PartitionFailure[];
  /** Resolves when the thread has closed its partitions (its 'stopped', or its end). */
  stopped?: () => void;
  /** It said 'stopped': its partitions and its handle on the store are closed. */
  closed?: true;
  /** What ended it during the stop (an uncaught error, out of heap), for the warning its exit logs. */
  died?: Error;
  /** The thread has ended: nothing sent to it is answered. */
  exited?: Error;
}

/** A thread's stream chunk, as `rows` waits for it. */
type Chunk = Extract<FromThread, { t: 'chunk' }>;

/** Request numbers travel as u32 (frames.ts): they wrap, long after any request they could meet. */
const MAX_Q = 0xffffffff;

/**
 * A thread's configuration: the invoker's limit shared out, so that together they keep it, and
 * the log format this thread chose ('auto' asks whether stdout is a terminal, which a thread's is not).
 */
export function threadConfig(config: Config, threads: number): Config {
  const limit = config.worker.invoker.concurrent_invocations_limit;
  const format = config.log.format === 'auto' ? (process.stdout.isTTY === true ? 'pretty' : 'json') : config.log.format;
  return {
    ...config,
    log: { ...config.log, format },
    worker: { ...config.worker, invoker: { ...config.worker.invoker, concurrent_invocations_limit: Math.max(1, Math.floor(limit / threads)) } },
  };
}

export class PartitionThreads implements PartitionGateway {
  private q = 0;
  private readonly pending = new Map<number, Pending>();
  private readonly chunks = new Map<number, { thread: number; deliver: (c: Chunk) => void }>();
  private readonly watchers = new Set<(changes: InvocationChanges) => void>();
  /** The generation of the threads' watch, counted up each time it turns on (frames carry it). */
  private watchGen = 0;
  private state: 'new' | 'starting' | 'serving' | 'stopping' | 'stopped' = 'new';
  private starting: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private unfollow: (() => void) | undefined;
  private readonly handles: Handle[] = [];
  /** Partition index → the thread serving it (contiguous ranges: threads in order list partitions in order). */
  readonly owners: readonly number[];
  private readonly subscriptionMirror: SubscriptionMirror;

  constructor(
    private readonly config: Config,
    private readonly logger: Logger,
  ) {
    const threads = config.worker.threads;
    assert(threads > 1 && threads <= config.worker.partitions, () => `${threads} partition threads for ${config.worker.partitions} partitions`);
    this.owners = Array.from({ length: config.worker.partitions }, (_, p) => Math.floor((p * threads) / config.worker.partitions));
    this.subscriptionMirror = new SubscriptionMirror(config.worker.partitions);
  }

  /** Whether the threads serve their partitions (started, not stopping). */
  get serving(): boolean {
    return this.state === 'serving';
  }

  /**
   * Starts the threads, once the main thread has opened (and upgraded) the store: each opens its
   * partitions on it and resolves when all have; a thread that cannot is the start's failure. No
   * attempt runs before `go`.
   */
  start(registry: Registry): Promise<void> {
    assert(this.state === 'new', () => `the partition threads started when ${this.state}`);
    this.state = 'starting';
    this.starting = this.spawn(registry).then(
      () => {
        this.state = 'serving';
        this.logger.info({ threads: this.handles.length, partitions_per_thread: this.handles.map((h) => this.owners.filter((o) => o === h.index).length) }, 'partition threads started');
      },
      async (err: unknown) => {
        this.state = 'stopped';
        this.unfollow?.();
        await Promise.all(this.handles.map((h) => h.thread.terminate()));
        throw err;
      },
    );
    return this.starting;
  }

  private async spawn(registry: Registry): Promise<void> {
    const threads = this.config.worker.threads;
    const mesh = meshOf(threads);
    const perThread = threadConfig(this.config, threads);
    // The history and the listener with no await between: a thread misses and repeats no record.
    const history = registry.history();
    this.unfollow = registry.onRecord((rec) => this.broadcast({ t: 'record', rec }));
    const slots = sharedSlotsMemory();
    const ready: Array<Promise<void>> = [];
    for (let t = 0; t < threads; t++) {
      const ports = mesh[t]!.filter((p): p is MessagePort => p !== undefined);
      const workerData: ThreadData & { keelPartitionThread: true } = { keelPartitionThread: true, config: perThread, thread: t, owners: [...this.owners], history, mesh: mesh[t]!, slots };
      const thread = new Thread(threadMainPath(), { workerData, transferList: ports, name: `keel-partitions-${t}` });
      const partitions = this.owners.flatMap((o, p) => (o === t ? [p] : []));
      const handle: Handle = { index: t, thread, frames: new FrameBatcher(thread), partitions, inFlight: 0, failures: [] };
      this.handles.push(handle);
      if (this.watchers.size > 0) thread.postMessage({ t: 'watch', on: true, gen: this.watchGen } satisfies ToThread);
      ready.push(this.attend(handle));
    }
    const failed = (await Promise.allSettled(ready)).find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
  }

  /** The threads' partitions start their work (attempts, timers, cleaning): once the server listens. */
  go(): void {
    assert(this.state === 'serving', () => `the partition threads told to go when ${this.state}`);
    this.broadcast({ t: 'go' });
  }

  /** Listens to one thread; resolves once it serves its partitions. A thread that fails after that ends the process. */
  private attend(h: Handle): Promise<void> {
    return new Promise((resolve, reject) => {
      let serving = false;
      h.thread.on('message', (m: ArrayBuffer | FromThread) => {
        if (m instanceof ArrayBuffer) return this.answered(m);
        if (m.t === 'ready') {
          serving = true;
          return resolve();
        }
        if (m.t === 'failed') return reject(errorOf(m.error));
        this.received(h, m);
      });
      h.thread.on('messageerror', (err) => this.logger.error({ err, code: 'RT0006', thread: h.index }, 'a message from a partition thread could not be read'));
      h.thread.once('error', (err) => (serving ? this.lost(h, err) : reject(err)));
      h.thread.once('exit', (code) => {
        if (this.state === 'stopping' && h.closed === undefined) {
          // Nothing is lost (every accepted call is in the store), but the next start recovers it: say so.
          this.logger.warn({ code: 'KEEL0503', thread: h.index, exit_code: code, ...(h.died ? { err: h.died } : {}) }, `partition thread ${h.index} ended during the stop before it closed its partitions: the next start recovers them from the store`);
        }
        this.abandon(h, new Error(`partition thread ${h.index} exited with code ${code}`));
        if (serving) this.lost(h, new Error(`exited with code ${code}`));
        else reject(new Error(`partition thread ${h.index} exited with code ${code} before it served`));
      });
    });
  }

  /** A thread gone while serving: its partitions answer nothing more, and accepted calls wait on them: stop, as a deposed node does. */
  private lost(h: Handle, err: Error): void {
    if (this.state === 'stopping' || this.state === 'stopped') {
      h.died ??= err;
      return;
    }
    this.logger.fatal({ err, code: 'KEEL0503', thread: h.index }, `partition thread ${h.index} stopped: the server stops (its partitions are recovered from the store at the next start)`);
    process.exit(1);
  }

  /** What a thread that ended left unanswered fails; a stop waiting for it goes on. */
  private abandon(h: Handle, err: Error): void {
    h.exited = err;
    for (const [q, p] of this.pending) {
      if (p.thread !== h.index) continue;
      this.pending.delete(q);
      h.inFlight -= 1;
      p.reject(err);
    }
    for (const [q, c] of this.chunks) {
      if (c.thread !== h.index) continue;
      this.chunks.delete(q);
      c.deliver({ t: 'chunk', q, rows: [], done: true, error: errorShape(err) });
    }
    h.stopped?.();
  }

  private received(h: Handle, m: Exclude<FromThread, { t: 'ready' } | { t: 'failed' }>): void {
    switch (m.t) {
      case 'answer':
        return this.settle(m.q, m.error === undefined ? { value: revive(m.value) } : { error: errorOf(m.error) });
      case 'chunk':
        this.chunks.get(m.q)?.deliver(m);
        return;
      case 'failures':
        h.failures = m.failures;
        return;
      case 'subscriptions':
        return this.subscriptionMirror.update(m.changes);
      case 'stopped':
        h.closed = true;
        return h.stopped?.();
    }
  }

  private settle(q: number, outcome: { value: unknown } | { error: Error }): void {
    const p = this.pending.get(q);
    if (p === undefined) return;
    this.pending.delete(q);
    this.handles[p.thread]!.inFlight -= 1;
    if ('error' in outcome) p.reject(outcome.error);
    else p.resolve(outcome.value);
  }

  private nextQ(): number {
    this.q = this.q >= MAX_Q ? 1 : this.q + 1;
    return this.q;
  }

  /** A request's answer, settled by the thread that will answer it (or by its end). */
  private expect<T>(h: Handle, q: number): Promise<T> {
    if (h.exited !== undefined) return Promise.reject(h.exited);
    h.inFlight += 1;
    return new Promise<T>((resolve, reject) => this.pending.set(q, { thread: h.index, resolve: resolve as (v: unknown) => void, reject }));
  }

  private broadcast(m: ToThread): void {
    for (const h of this.handles) h.thread.postMessage(m);
  }

  private threadOf(partitionKey: bigint): Handle {
    return this.handles[this.owners[partitionIndexOf(partitionKey, this.config.worker.partitions)]!]!;
  }

  /** A call to one thread; after the invoke frames of this turn, so that it finds what they made. */
  call<T>(h: Handle, m: CallName, args: unknown[]): Promise<T> {
    const q = this.nextQ();
    h.frames.flush();
    h.thread.postMessage({ t: 'call', q, m, args } satisfies ToThread);
    return this.expect<T>(h, q);
  }

  /** A call to the thread serving `partitionKey`. */
  callAt<T>(partitionKey: bigint, m: CallName, args: unknown[]): Promise<T> {
    return this.call(this.threadOf(partitionKey), m, args);
  }

  /** The same call to every thread, its answers in thread (so partition) order. */
  callAll<T>(m: CallName, args: unknown[]): Promise<T[]> {
    return Promise.all(this.handles.map((h) => this.call<T>(h, m, args)));
  }

  /** Every thread's rows in turn, pulled a chunk at a time. */
  async *rows<T>(m: StreamName, args: unknown[] = []): AsyncIterable<T> {
    for (const h of this.handles) yield* this.rowsOf<T>(h, m, args);
  }

  private async *rowsOf<T>(h: Handle, m: StreamName, args: unknown[]): AsyncIterable<T> {
    const q = this.nextQ();
    let done = false;
    const next = (ask: ToThread) =>
      new Promise<Chunk>((deliver) => {
        if (h.exited !== undefined) return deliver({ t: 'chunk', q, rows: [], done: true, error: errorShape(h.exited) });
        this.chunks.set(q, { thread: h.index, deliver });
        h.frames.flush(); // after the invoke frames of this turn, as a call
        h.thread.postMessage(ask);
      });
    try {
      let chunk = await next({ t: 'open', q, m, args });
      for (;;) {
        done = chunk.done;
        if (chunk.error !== undefined) throw errorOf(chunk.error);
        for (const row of chunk.rows) yield revive(row as T);
        if (done) return;
        chunk = await next({ t: 'next', q });
      }
    } finally {
      this.chunks.delete(q);
      if (!done) h.thread.postMessage({ t: 'close', q } satisfies ToThread);
    }
  }

  /** Status changes of every thread's durable batches; returns the stop function. */
  watch(listener: (changes: InvocationChanges) => void): () => void {
    this.watchers.add(listener);
    if (this.watchers.size === 1) {
      this.watchGen = (this.watchGen % 0xffffffff) + 1;
      this.broadcast({ t: 'watch', on: true, gen: this.watchGen });
    }
    return () => {
      if (this.watchers.delete(listener) && this.watchers.size === 0) this.broadcast({ t: 'watch', on: false, gen: this.watchGen });
    };
  }

  /**
   * A plain service's call may start in any partition: of two drawn at random, the one whose thread
   * has fewer requests waiting per partition it serves (every partition alike when all are idle; a
   * slow thread gets fewer new calls; two choices, not all, so that a burst does not pile onto the
   * thread that was idlest a moment ago).
   */
  anyKey(): bigint {
    const P = this.config.worker.partitions;
    const a = Math.floor(Math.random() * P);
    const b = Math.floor(Math.random() * P);
    const load = (p: number) => {
      const h = this.handles[this.owners[p]!]!;
      return h.inFlight / h.partitions.length;
    };
    return randomKeyOfPartition(load(b) < load(a) ? b : a, P);
  }

  invoke(req: InvokeRequest): Promise<InvokeOutcome> {
    const q = this.nextQ();
    const h = this.threadOf(req.id.partitionKey);
    h.frames.push(encodeInvokeRequest(q, req));
    return this.expect<InvokeOutcome>(h, q);
  }

  private answered(buf: ArrayBuffer): void {
    for (const frame of framesOf(buf)) {
      const { q, kind, body } = decodeOutcome(frame);
      // Changes sent for an earlier watch are older than what the current one's copy reads from the store.
      if (kind === 'changes') {
        if (q === this.watchGen && this.watchers.size > 0) this.changed(decodeChanges(body));
      }
      else if (kind === 'error') this.settle(q, { error: errorOf(JSON.parse(body.toString('utf8'))) });
      else if (kind === 'completed') this.settle(q, { value: { kind, status: invocationsTable.decode(body) } });
      else if (kind === 'backlog_full') this.settle(q, { value: { kind, full: JSON.parse(body.toString('utf8')) } });
      else this.settle(q, { value: { kind } });
    }
  }

  private changed(changes: InvocationChanges): void {
    for (const w of this.watchers) w(changes);
  }

  attach(id: InvocationId): Promise<InvocationStatus | undefined> {
    return this.callAt(id.partitionKey, 'attach', [id.bytes]);
  }

  output(id: InvocationId): Promise<OutputOutcome> {
    return this.callAt(id.partitionKey, 'output', [id.bytes]);
  }

  append(id: InvocationId, command: CommandKind): Promise<void> {
    return this.callAt(id.partitionKey, 'append', [id.bytes, command]);
  }

  /** What the Kafka consumers (on this thread) need of the partitions. */
  subscriptionPartitions(): SubscriptionPartitions {
    // Encoded into a buffer of its own: the records' values are views into kafkajs's whole fetch
    // response (megabytes), which a structured clone of the command would copy for every chunk.
    const appendTo = (partition: number, command: CommandKind) => this.call<void>(this.handles[this.owners[partition]!]!, 'appendTo', [partition, new Uint8Array(encodeCommand(command as Command))]);
    return threadedPartitions(this.subscriptionMirror, this.config.worker.partitions, appendTo);
  }

  /** Partitions that stopped, as each thread reported them (as they stopped, before any refusal they caused). */
  failures(): PartitionFailure[] {
    return this.handles.flatMap((h) => h.failures);
  }

  async setLimitRules(book: RuleBook): Promise<void> {
    await this.callAll('setLimitRules', [book]);
  }

  async setStateTtls(book: ReadonlyArray<{ service: string; ttl_ms: number; on_access: boolean }>, options: { onlyWhereDiffers?: boolean } = {}): Promise<void> {
    await this.callAll('setStateTtls', [book, options]);
  }

  /** Every thread's metric cells, for the main thread's /metrics to add to its own. */
  metrics(): Promise<CollectedMetric[][]> {
    return this.callAll('metrics', []);
  }

  /** Each thread closes its partitions and its handle on the store; resolves once all have (a start under way first ends). */
  stop(): Promise<void> {
    this.stopping ??= this.stopThreads();
    return this.stopping;
  }

  private async stopThreads(): Promise<void> {
    await this.starting?.catch(() => {});
    if (this.state !== 'serving') return;
    this.state = 'stopping';
    this.unfollow?.();
    await Promise.all(
      this.handles.map((h) => {
        const stopped = new Promise<void>((resolve) => (h.stopped = resolve));
        h.thread.postMessage({ t: 'stop' } satisfies ToThread);
        return stopped;
      }),
    );
    await Promise.all(this.handles.map((h) => h.thread.terminate()));
    this.state = 'stopped';
  }
}

/** A port between every two threads: mesh[a][b] is a's end of the channel to b. */
function meshOf(threads: number): Array<Array<MessagePort | undefined>> {
  const mesh: Array<Array<MessagePort | undefined>> = Array.from({ length: threads }, () => Array.from({ length: threads }, () => undefined));
  for (let a = 0; a < threads; a++) {
    for (let b = a + 1; b < threads; b++) {
      const { port1, port2 } = new MessageChannel();
      mesh[a]![b] = port1;
      mesh[b]![a] = port2;
    }
  }
  return mesh;
}
