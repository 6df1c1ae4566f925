// A partition thread (worker.threads > 1, issue 23): its partitions' processors, its own handle on
// the shared store, its invoker and endpoint connections, a replica of the schema registry, its
// metric cells. The main thread's edge asks it through invoke frames (partition/frames.ts) and
// messages (messages.ts); outbox entries for another thread's partitions go straight to that
// thread over the mesh of ports, with the cluster's discipline (BatchAppender).
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { Config } from '../config/index.js';
import { installLeanAsyncBind } from '../common/async-bind.js';
import { createLogger, type Logger } from '../common/logger.js';
import { InvocationId } from '../common/ids.js';
import { assert } from '../common/assert.js';
import { endpointClientFor } from '../endpoint/client.js';
import { signerFor } from '../endpoint/identity.js';
import { Invoker } from '../invoker/index.js';
import { SharedSlots } from '../invoker/deployment-slots.js';
import { decodeCommand, type CommandKind } from '../log/commands.js';
import { Registry } from '../metadata/registry.js';
import type { MetaRecord } from '../metadata/store.js';
import { appendBatch, BatchAppender, type AppendAnswer, type AppendEntry } from '../partition/batch-appender.js';
import { decodeInvokeRequest, encodeChanges, encodeOutcome, FrameBatcher, framesOf } from '../partition/frames.js';
import { acceptInvoke, LocalGateway } from '../partition/gateway.js';
import { Worker } from '../partition/worker.js';
import { WorkerIntrospection } from '../admin/partition-source.js';
import { sampleQueues } from '../admin/queue-metrics.js';
import { openWorkerStore, workerStoreOptions } from '../storage/store.js';
import { createTracing, KeelMetrics } from '../telemetry/index.js';
import { CHUNK_BYTES, CHUNK_ROWS, errorShape, revive, rowBytes, type CallName, type FromThread, type StreamName, type ToThread } from './messages.js';

export interface ThreadData {
  config: Config;
  thread: number;
  /** Partition index → the thread that serves it. */
  owners: number[];
  /** The registry's records so far; later ones come as messages. */
  history: MetaRecord[];
  /** A port to each other thread (undefined at this thread's own index). */
  mesh: Array<MessagePort | undefined>;
  /** The deployments' running attempts, counted for the whole process (invoker/deployment-slots.ts). */
  slots: SharedArrayBuffer;
}

interface Parts {
  logger: Logger;
  worker: Worker;
  metrics: KeelMetrics;
  appliers: Array<(rec: MetaRecord) => void>;
  /** The partitions start their work: attempts, timers, cleaning. */
  go: () => void;
  stop: () => Promise<void>;
}

async function start(data: ThreadData): Promise<Parts & { opened: number[] }> {
  const { config, thread, owners, history, mesh, slots } = data;
  const metrics = new KeelMetrics();
  const logger = createLogger(config.log.level, config.log.format, (code) => metrics.error(code)).child({ thread });
  const appliers: Array<(rec: MetaRecord) => void> = [];
  const registry = Registry.replica(config, logger.child({ component: 'metadata' }), history, (apply) => {
    appliers.push(apply);
    return () => void appliers.splice(appliers.indexOf(apply), 1);
  });
  metrics.knownTarget = (service, handler) => registry.handler(service, handler) !== undefined;
  const tracing = await createTracing(config.tracing.endpoint, logger.child({ component: 'tracing' }));
  const telemetry = { metrics, tracing };
  const db = await openWorkerStore(config.worker.storage_db.path, workerStoreOptions(config));
  const owned = owners.flatMap((t, p) => (t === thread ? [p] : []));
  const worker = new Worker(config, logger.child({ component: 'worker' }), telemetry, owned);
  const endpoints = endpointClientFor(config, signerFor(config));

  const peers = mesh.filter((p): p is MessagePort => p !== undefined);
  const freed = (deployment: string) => peers.forEach((peer) => peer.postMessage({ t: 'freed', deployment } satisfies PeerMessage));
  const invoker = new Invoker(config, registry, endpoints, logger.child({ component: 'invoker' }), telemetry, new SharedSlots(slots, freed));
  registry.onDeploymentLimits(() => invoker.limitsChanged());
  sampleQueues(metrics, config, worker, invoker, endpoints, { stores: false });
  worker.setRemote(new BatchAppender((p) => (owners[p] !== thread ? { name: `thread ${owners[p]}`, to: owners[p]! } : undefined), (to, entries) => meshAppend(mesh[to]!, entries)));
  for (const peer of peers) servePeer(peer, worker, invoker);
  const answer = await worker.open(db);
  if ('failure' in answer) throw answer.failure;
  await worker.setLimitRules(registry.limitRules());
  await worker.setStateTtls(registry.stateTtls(), { onlyWhereDiffers: true });
  const go = () => worker.start(invoker);
  const stop = async () => {
    invoker.stop();
    await worker.stop();
    endpoints.close();
    await db.close();
    await tracing.shutdown().catch(() => {});
  };
  return { logger, worker, metrics, appliers, go, stop, opened: answer.opened };
}

let meshQ = 0;
const meshPending = new Map<number, (a: AppendAnswer) => void>();

function meshAppend(peer: MessagePort, entries: readonly AppendEntry[]): Promise<AppendAnswer> {
  const q = ++meshQ;
  return new Promise((resolve) => {
    meshPending.set(q, resolve);
    peer.postMessage({ t: 'append', q, entries });
  });
}

type PeerMessage =
  | { t: 'append'; q: number; entries: Array<{ partition: number; command: Uint8Array }> }
  | { t: 'appended'; q: number; answer: AppendAnswer }
  | { t: 'freed'; deployment: string };

function servePeer(peer: MessagePort, worker: Worker, invoker: Invoker): void {
  peer.on('message', (m: PeerMessage) => {
    if (m.t === 'freed') return invoker.slotFreed(m.deployment);
    if (m.t === 'appended') {
      const resolve = meshPending.get(m.q);
      meshPending.delete(m.q);
      resolve?.(m.answer);
      return;
    }
    const entries = m.entries.map((e) => ({ partition: e.partition, command: revive(e.command) as Buffer }));
    void appendBatch(worker, entries).then((answer) => peer.postMessage({ t: 'appended', q: m.q, answer }));
  });
}

/** Answers the main thread: invoke frames, calls, streams, records, the watch of statuses, stop. */
class Serving {
  private readonly out: FrameBatcher;
  private readonly gateway: LocalGateway;
  private readonly source: WorkerIntrospection;
  private readonly streams = new Map<number, AsyncIterator<unknown>>();
  private unwatch: (() => void) | undefined;

  constructor(
    private readonly port: MessagePort,
    private readonly parts: Parts,
  ) {
    this.out = new FrameBatcher(port);
    this.gateway = new LocalGateway(parts.worker);
    this.source = new WorkerIntrospection(parts.worker);
    port.on('message', (m: ArrayBuffer | ToThread) => (m instanceof ArrayBuffer ? this.frames(m) : this.message(m)));
    // Before the refusals it causes reach the main thread: /health says so once a client has seen one.
    const report = () => this.post({ t: 'failures', failures: parts.worker.failures() });
    parts.worker.onFailure(report);
    report(); // one that stopped while the thread started (its rule books)
    // Before 'ready' (this runs first): the consumers on the main thread start from these positions.
    // Not after the turn's frames (nothing in them concerns the copy), but always before the answer
    // to the append that made the batch, which comes later on the same port.
    parts.worker.watchSubscriptions((changes) => this.port.postMessage({ t: 'subscriptions', changes } satisfies FromThread));
  }

  /** After the frames of this turn: status changes a batch made reach the query engine before any answer that followed it. */
  private post(m: FromThread): void {
    this.out.flush();
    this.port.postMessage(m);
  }

  private frames(buf: ArrayBuffer): void {
    for (const frame of framesOf(buf)) {
      const { q, req } = decodeInvokeRequest(frame);
      acceptInvoke(this.parts.worker, req).then(
        (outcome) => this.out.push(encodeOutcome(q, outcome)),
        (err: unknown) => this.out.push(encodeOutcome(q, { kind: 'error', error: errorShape(err) })),
      );
    }
  }

  private message(m: ToThread): void {
    switch (m.t) {
      case 'call':
        return void Promise.resolve()
          .then(() => this.call(m.m, revive(m.args)))
          .then((value) => this.answer(m.q, value))
          .catch((err: unknown) => this.post({ t: 'answer', q: m.q, error: errorShape(err) }));
      case 'go':
        return this.parts.go();
      case 'open':
        this.streams.set(m.q, this.open(m.m, m.args)[Symbol.asyncIterator]());
        return void this.pump(m.q);
      case 'next':
        return void this.pump(m.q);
      case 'close':
        this.streams.get(m.q)?.return?.()?.catch(() => {});
        return void this.streams.delete(m.q);
      case 'record':
        return this.parts.appliers.forEach((apply) => apply(m.rec));
      case 'watch':
        assert(!m.on || (Number.isInteger(m.gen) && m.gen > 0), () => `a watch turned on with generation ${m.gen}`);
        this.unwatch?.();
        this.unwatch = m.on ? this.parts.worker.watchInvocations((changes) => this.out.push(encodeChanges(changes, m.gen))) : undefined;
        return;
      case 'stop':
        return void this.parts
          .stop()
          .catch((err: unknown) => this.parts.logger.error({ err, code: 'RT0006' }, 'a partition thread did not close cleanly'))
          .finally(() => this.post({ t: 'stopped' }));
    }
  }

  /** An answer that cannot cross (a value a clone refuses) is a refusal, not an uncaught error. */
  private answer(q: number, value: unknown): void {
    try {
      this.post({ t: 'answer', q, value });
    } catch (err) {
      this.post({ t: 'answer', q, error: errorShape(err) });
    }
  }

  private call(m: CallName, args: unknown[]): Promise<unknown> {
    const s = this.source;
    const id = () => InvocationId.fromBytes(args[0] as Uint8Array)!;
    switch (m) {
      case 'attach': return this.gateway.attach(id());
      case 'output': return this.gateway.output(id());
      case 'append': return this.gateway.append(id(), args[1] as CommandKind);
      case 'appendTo': return this.parts.worker.appendTo(args[0] as number, decodeCommand(args[1] as Buffer));
      case 'journalEntries': return s.journalEntries(args[0] as string);
      case 'stepAttempts': return s.stepAttempts(args[0] as string);
      case 'manage': return s.manage(args[0] as string, args[1] as Parameters<WorkerIntrospection['manage']>[1]);
      case 'pauseFlowQueue': return s.pauseFlowQueue(args[0] as string, args[1] as string, args[2] as boolean);
      case 'schedule': return s.schedule(args[0] as string);
      case 'applySchedule': return s.applySchedule(args[0] as Parameters<WorkerIntrospection['applySchedule']>[0]);
      case 'setState': return s.setState(args[0] as string, args[1] as string, args[2] as Map<string, Buffer>, args[3] as string | undefined);
      case 'unfinishedPinnedTo': return s.unfinishedPinnedTo(args[0] as string);
      case 'replayCandidates': return s.replayCandidates(args[0] as Set<string>, args[1] as string, args[2] as number);
      case 'partitions': return s.partitions();
      case 'setLimitRules': return this.parts.worker.setLimitRules(args[0] as Parameters<Worker['setLimitRules']>[0]);
      case 'setStateTtls': return this.parts.worker.setStateTtls(args[0] as Parameters<Worker['setStateTtls']>[0], args[1] as { onlyWhereDiffers?: boolean });
      case 'metrics': return this.parts.metrics.collect();
      case 'settle': return Promise.resolve(); // its answer follows the frames queued before it
    }
  }

  private open(m: StreamName, _args: unknown[]): AsyncIterable<unknown> {
    const s = this.source;
    switch (m) {
      case 'invocationLines': return s.invocationLines();
      case 'state': return s.state();
      case 'inbox': return s.inbox();
      case 'flowQueues': return s.flowQueues();
      case 'flowEntries': return s.flowEntries();
      case 'flowScheduler': return s.flowScheduler();
      case 'userLimits': return s.userLimits();
      case 'locks': return s.locks();
      case 'promises': return s.promises();
      case 'schedules': return s.schedules();
    }
  }

  /** The stream's next chunk, posted; the main thread asks for the one after once it has used this one. */
  private async pump(q: number): Promise<void> {
    const it = this.streams.get(q);
    if (it === undefined) return;
    const rows: unknown[] = [];
    let bytes = 0;
    try {
      while (rows.length < CHUNK_ROWS && bytes < CHUNK_BYTES) {
        const r = await it.next();
        if (r.done) {
          this.streams.delete(q);
          return this.post({ t: 'chunk', q, rows, done: true });
        }
        rows.push(r.value);
        bytes += rowBytes(r.value);
      }
      this.post({ t: 'chunk', q, rows, done: false });
    } catch (err) {
      this.streams.delete(q);
      it.return?.()?.catch(() => {}); // its store iterator closes
      this.post({ t: 'chunk', q, rows: [], done: true, error: errorShape(err) });
    }
  }
}

if (parentPort !== null && (workerData as { keelPartitionThread?: boolean } | undefined)?.keelPartitionThread === true) {
  const port = parentPort;
  // As on the main thread (run.ts): Node's HTTP/2 client binds a function per request.
  installLeanAsyncBind();
  start(workerData as ThreadData).then(
    (parts) => {
      new Serving(port, parts);
      port.postMessage({ t: 'ready', opened: parts.opened } satisfies FromThread);
    },
    (err: unknown) => port.postMessage({ t: 'failed', error: errorShape(err) } satisfies FromThread),
  );
}
