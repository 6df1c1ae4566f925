// The server's side of the query engine: starts the engine process (engine-main.ts), feeds its
// copy of the invocation statuses from the partitions' durable batches, answers its requests
// for the tables filled per query, and runs queries there with a deadline. A query the engine
// does not stop in time, or an engine that dies, costs a restart of the engine (its copy is
// rebuilt from the store), never the server.

import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { QueryEngineConfig } from '../../config/index.js';
import type { Logger } from '../../common/logger.js';
import { KeelError } from '../../errors/index.js';
import type { Registry } from '../../metadata/registry.js';
import { PER_QUERY_TABLES, rowBytes, type IntrospectionSource, type InvocationChanges, type Row, type TableFilter } from '../introspection.js';
import { abandoned, queryFailure as failure, type Format, type FromEngine, type Journals, type ToEngine } from './protocol.js';
import { keep, recall } from './lru.js';
import { shapeOf } from './shape.js';

/** Queries the engine runs at once; more wait here, up to MAX_WAITING, then are refused. */
const MAX_RUNNING = 4;
const MAX_WAITING = 64;
/** Past a query's time limit, how long the engine has to stop it before it is restarted. */
const STOP_GRACE_MS = 5_000;
/**
 * Status changes kept for the engine before they are sent; every query sends them first. Large
 * batches cost the engine less per change (one scan of the copy per batch).
 */
const FLUSH_IDS = 16_384;
const FLUSH_BYTES = 16 * 1024 * 1024;
/** Changes kept here are sent at the latest this long after the first of them. */
const IDLE_FLUSH_MS = 5_000;
/** Change batches the engine may have unapplied; past it changes wait here. */
const MAX_UNAPPLIED = 4;
/** Changes waiting here past this many ids: the engine cannot keep up; it restarts and reloads. */
const MAX_PENDING_IDS = 250_000;
/** Chunks of the initial scan in flight at once (each ~1 MiB: scanInvocationLines). */
const LOAD_WINDOW = 2;
/**
 * Constant answers kept here (see `constant` in protocol.ts): `restate invocations describe` sends
 * two catalogue probes each time; kept, each is answered without a round trip to the engine.
 */
const MAX_CONSTANTS = 64;
const MAX_CONSTANT_BYTES = 64 * 1024;
/** Shapes whose journal ids the engine told (`journal-ids`), and the most ids read with one query. */
const MAX_JOURNAL_SHAPES = 256;
const MAX_PREFETCH_IDS = 64;
/** An engine in use when idle_timeout passed is looked at again after at least this long. */
const MIN_USE_CHECK_MS = 1_000;
/** Restarts after a crash wait this long, doubling up to the cap. */
const RESTART_INITIAL_MS = 500;
const RESTART_MAX_MS = 30_000;

export interface Answer {
  rows: number;
  /** pg: the RowDescription message. */
  head?: Uint8Array;
  /** The answer's bytes: the first chunk, then the others as they are asked for. */
  body: AsyncIterable<Uint8Array>;
  /** The whole answer, when it came in one chunk. */
  whole?: Uint8Array;
}

export interface QueryOptions {
  params?: Array<string | null>;
  /** Aborted when the client goes away: the engine stops the query. */
  signal?: AbortSignal;
}

interface Pending {
  qid: number;
  sql: string;
  format: Format;
  params: Array<string | null> | undefined;
  deadline: number;
  resolve: (a: Answer) => void;
  reject: (e: Error) => void;
  watchdog?: NodeJS.Timeout;
  onChunk?: (m: Extract<FromEngine, { t: 'chunk' }>) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** An answer that came in one chunk. */
interface Whole {
  rows: number;
  head?: Uint8Array;
  chunk: Uint8Array;
}

const wholeAnswer = ({ rows, head, chunk }: Whole): Answer => ({ rows, ...(head ? { head } : {}), whole: chunk, body: (async function* () { yield chunk; })() });
const constantKey = (sql: string, format: Format, params: Array<string | null> | undefined): string =>
  `${format}\0${params !== undefined && params.length > 0 ? JSON.stringify(params) : ''}\0${sql}`;
const unavailable = (why: string) => new KeelError('KEEL0023', `the query engine is unavailable: ${why}`);


/**
 * The engine's entry point in `dist/`: beside this module in the compiled tree, or, when this
 * code runs from the server bundle (`dist/bundle/keel.cjs`), in the compiled tree next to it.
 */
function engineMainPath(): string {
  for (const candidate of ['./engine-main.js', '../admin/query/engine-main.js']) {
    const path = fileURLToPath(new URL(candidate, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new KeelError('KEEL0023', `the query engine's entry point (engine-main.js) is not next to ${fileURLToPath(import.meta.url)}: run npm run build`);
}

/**
 * Engine processes started by this server process. Counted per process, not per engine: two
 * engines in one process (tests, a restart of the admin server) must never share a directory,
 * or the exit of one removes the files of the other.
 */
let spawned = 0;

export class QueryEngine {
  private child: ChildProcess | undefined;
  private ready = false;
  /** The engine's copy is whole; until it is, a query that reads it waits outside its time limit (the watchdog starts here). */
  private copied = false;
  private unwatch: (() => void) | undefined;
  private pending = new Map<string, Uint8Array | null>();
  private pendingBytes = 0;
  private seq = 0;
  private appliedSeq = 0;
  private appliedWaiters: Array<{ seq: number; resolve: () => void }> = [];
  private expiry: NodeJS.Timeout | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  /** When the last query came (Date.now()); the engine stops once config.idle_timeout_ms passed since. */
  private lastQueryMs = 0;
  private unusedTimer: NodeJS.Timeout | undefined;
  private qids = 0;
  private readonly running = new Map<number, Pending>();
  private readonly waiting: Pending[] = [];
  private closed = false;
  private restartDelay = RESTART_INITIAL_MS;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly root: string;
  /** Literal positions of the journal ids, by shape key (`journal-ids`); emptied when the engine stops. */
  private readonly journalShapes = new Map<string, number[]>();
  /** Constant answers by constantKey, least recently used first; emptied when the engine stops. */
  private readonly constants = new Map<string, Whole>();

  constructor(
    private readonly config: QueryEngineConfig,
    baseDir: string,
    private readonly registry: Registry,
    private readonly source: () => IntrospectionSource,
    private readonly logger: Logger,
  ) {
    this.root = join(baseDir, 'query');
  }

  /** Starts the engine process (idempotent): the copy loads in the background. */
  start(): void {
    if (this.child !== undefined || this.closed || this.restartTimer !== undefined) return;
    this.spawn();
  }

  /**
   * At the server's start: an engine that never stops (idle_timeout 0) starts now, so that its copy
   * is ready for the first query; otherwise the first query starts it. Keeping the copy costs every
   * invocation (its status parsed into DuckDB: ~10% of a noop call's CPU here), queried or not.
   */
  boot(): void {
    if (this.config.idle_timeout_ms === 0) this.start();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.restartTimer);
    clearTimeout(this.idleTimer);
    clearTimeout(this.expiry);
    clearTimeout(this.unusedTimer);
    this.stopChild('the server is shutting down');
  }

  /** Runs one query; rejects with a coded KeelError (KEEL0010, KEEL0020–KEEL0024). */
  query(sql: string, format: Format, opts: QueryOptions = {}): Promise<Answer> {
    if (this.closed) return Promise.reject(unavailable('the server is shutting down'));
    this.lastQueryMs = Date.now();
    this.start();
    const kept = recall(this.constants, constantKey(sql, format, opts.params));
    if (kept !== undefined) return Promise.resolve(wholeAnswer(kept));
    if (this.waiting.length >= MAX_WAITING) return Promise.reject(unavailable(`${this.waiting.length} queries are waiting already; retry shortly`));
    return new Promise<Answer>((resolve, reject) => {
      const p: Pending = { qid: ++this.qids, sql, format, params: opts.params, deadline: Date.now() + this.config.query_timeout_ms, resolve, reject };
      if (opts.signal !== undefined) {
        p.signal = opts.signal;
        p.onAbort = () => this.abort(p);
        opts.signal.addEventListener('abort', p.onAbort, { once: true });
      }
      this.waiting.push(p);
      this.pump();
    });
  }

  // ----------------------------------------------------------------------------- process

  private spawn(): void {
    const generation = ++spawned;
    mkdirSync(this.root, { recursive: true });
    this.removeStaleDirs();
    const dir = join(this.root, `engine-${process.pid}-${generation}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(join(dir, 'spill'), { recursive: true });
    const heapMiB = Math.max(512, Math.ceil((8 * this.config.max_result_bytes) / (1024 * 1024)));
    const child = fork(engineMainPath(), [], {
      serialization: 'advanced',
      execArgv: [`--max-old-space-size=${heapMiB}`],
      // glibc gives each thread that allocates an arena of its own; DuckDB's threads would keep
      // hundreds of MB of freed memory resident. Two arenas keep the engine's memory near its use.
      env: { ...process.env, MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? '2' },
      // Its own output (a crash's trace) becomes log lines of the server's: never mixed into them.
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    this.child = child;
    this.forwardStderr(child);
    this.ready = false;
    this.copied = false;
    // A message a stopped engine sent before it went is about queries and shapes of that engine.
    child.on('message', (m) => this.child === child && this.onMessage(m as FromEngine));
    child.on('error', (err) => this.logger.error({ err, code: 'KEEL0023' }, 'query engine process error'));
    child.on('exit', (code, signal) => this.onExit(child, dir, code, signal));
    // The copy follows every durable batch from now on; the scan after `ready` fills in the rest.
    this.unwatch = this.source().watchInvocations((changes) => this.onChanges(changes));
    this.watchUse();
    this.send({ t: 'init', options: { dir, memory_limit_bytes: this.config.memory_limit_bytes, threads: this.config.threads, max_result_rows: this.config.max_result_rows, max_result_bytes: this.config.max_result_bytes, recent_statuses: this.config.recent_statuses, indexed_statuses: this.config.indexed_statuses } });
  }

  /** No query for idle_timeout (never with idle_timeout 0), none running or waiting either. */
  private unused(): boolean {
    const idleMs = this.config.idle_timeout_ms;
    return idleMs > 0 && Date.now() - this.lastQueryMs >= idleMs && this.running.size === 0 && this.waiting.length === 0;
  }

  /** Stops the engine once idle_timeout passed without a query (none running or waiting either). */
  private watchUse(): void {
    const idleMs = this.config.idle_timeout_ms;
    if (idleMs === 0 || this.unusedTimer !== undefined) return;
    const check = (): void => {
      this.unusedTimer = undefined;
      if (this.child === undefined) return;
      const quietMs = Date.now() - this.lastQueryMs;
      if (!this.unused()) {
        this.unusedTimer = setTimeout(check, Math.max(idleMs - quietMs, MIN_USE_CHECK_MS)).unref();
        return;
      }
      this.logger.info({ idle_ms: quietMs }, `query engine stopped: no query for ${Math.round(quietMs / 1000)} s (admin.query_engine.idle_timeout); the next query starts it again`);
      this.stopChild('the query engine stopped unused');
    };
    this.unusedTimer = setTimeout(check, idleMs).unref();
  }

  private forwardStderr(child: ChildProcess): void {
    let partial = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (text: string) => {
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      if (partial.length > 64 * 1024) partial = '';
      for (const line of lines) if (line.trim() !== '') this.logger.warn({ code: 'KEEL0023' }, `query engine: ${line}`);
    });
  }

  /** Directories of engines of processes that are gone (a crash leaves them behind). */
  private removeStaleDirs(): void {
    for (const name of readdirSync(this.root)) {
      const pid = Number(/^engine-(\d+)-\d+$/.exec(name)?.[1]);
      if (!Number.isInteger(pid) || pid === process.pid) continue;
      let alive = true;
      try {
        process.kill(pid, 0);
      } catch {
        alive = false;
      }
      if (!alive) rmSync(join(this.root, name), { recursive: true, force: true });
    }
  }

  private stopChild(why: string): void {
    this.constants.clear();
    this.journalShapes.clear();
    this.unwatch?.();
    this.unwatch = undefined;
    this.pending.clear();
    this.pendingBytes = 0;
    const child = this.child;
    this.child = undefined;
    this.ready = false;
    this.copied = false;
    for (const p of [...this.running.values()]) this.fail(p, unavailable(why));
    if (this.closed) for (const p of this.waiting.splice(0)) p.reject(unavailable(why));
    for (const w of this.appliedWaiters.splice(0)) w.resolve();
    // Those that waited out a load have a limit again: the next engine's start, or KEEL0023.
    const deadline = Date.now() + this.config.query_timeout_ms;
    for (const p of this.waiting) p.deadline = Math.min(p.deadline, deadline);
    this.expireWaiting();
    child?.kill('SIGKILL');
  }

  private onExit(child: ChildProcess, dir: string, code: number | null, signal: NodeJS.Signals | null): void {
    rmSync(dir, { recursive: true, force: true });
    if (this.child !== child) return; // stopped on purpose; a new one may run already
    this.logger.error({ code: 'KEEL0023', exit_code: code, signal }, `query engine exited (${signal ?? code}): restarting it in ${this.restartDelay} ms`);
    this.stopChild('the query engine stopped; it is restarting');
    this.scheduleRestart();
  }

  private scheduleRestart(): void {
    if (this.closed) return;
    const delay = this.restartDelay;
    this.restartDelay = Math.min(RESTART_MAX_MS, this.restartDelay * 2);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (!this.unused()) this.spawn(); // else the next query starts it
    }, delay);
    this.restartTimer.unref();
  }

  /** Kills the engine and starts another (which reloads its copy). */
  private restart(why: string): void {
    this.logger.error({ code: 'KEEL0023' }, `query engine restarted: ${why}`);
    this.stopChild(`the query engine restarted: ${why}`);
    this.scheduleRestart();
  }

  private send(m: ToEngine): void {
    if (this.child?.connected) this.child.send(m);
  }

  private onMessage(m: FromEngine): void {
    switch (m.t) {
      case 'ready':
        this.onReady();
        break;
      case 'applied':
        this.appliedSeq = Math.max(this.appliedSeq, m.seq);
        this.appliedWaiters = this.appliedWaiters.filter((w) => (w.seq <= this.appliedSeq ? (w.resolve(), false) : true));
        break;
      case 'need':
        void this.serveRows(m.qid, m.table, m.filter);
        break;
      case 'need-journals':
        void this.serveJournals(m.qid, m.ids);
        break;
      case 'journal-ids':
        keep(this.journalShapes, m.key, m.literals, MAX_JOURNAL_SHAPES);
        break;
      case 'answer':
        this.onAnswer(m);
        break;
      case 'chunk':
        this.running.get(m.qid)?.onChunk?.(m);
        break;
      case 'failed': {
        const p = this.running.get(m.qid);
        if (p !== undefined) this.fail(p, failure(m.error));
        break;
      }
      case 'log':
        this.logger[m.level]({ ...m.fields, ...(m.code ? { code: m.code } : {}) }, m.msg);
        break;
    }
  }

  private onReady(): void {
    this.ready = true;
    this.send({ t: 'load-begin' });
    this.flush();
    void this.load(this.child);
    this.pump();
  }

  /**
   * The initial scan: every stored status, in chunks of lines, LOAD_WINDOW in flight. A chunk is
   * one buffer, its records dropped as they were copied into it, refilled once sent (`send`
   * serializes at once): the server's heap holds no record across the engine's apply.
   */
  private async load(child: ChildProcess | undefined): Promise<void> {
    try {
      for await (const lines of this.source().invocationLines()) {
        if (this.child !== child) return;
        const seq = ++this.seq;
        this.send({ t: 'load', seq, lines });
        await this.applied(seq - LOAD_WINDOW + 1);
      }
      if (this.child !== child) return;
      const end = ++this.seq;
      this.send({ t: 'load-end', seq: end });
      await this.applied(end);
      if (this.child === child) this.copyWhole();
    } catch (err) {
      if (this.child === child) this.restart(`the statuses could not be read for its copy (${(err as Error).message})`);
    }
  }

  /**
   * Queries that waited for the copy have their whole time limit from here: the first
   * query after a start (idle_timeout) waits for a copy of however many statuses, and a time limit
   * that counted the load would refuse it on a large store.
   */
  private copyWhole(): void {
    this.copied = true;
    this.restartDelay = RESTART_INITIAL_MS; // a start that gets this far is not a crash loop
    const deadline = Date.now() + this.config.query_timeout_ms;
    for (const p of this.waiting) p.deadline = Math.max(p.deadline, deadline);
    for (const p of this.running.values()) if (p.watchdog === undefined) this.watch(p, this.config.query_timeout_ms);
    this.pump();
  }

  /** Resolves once the engine applied change batch `seq` (or stopped). */
  private applied(seq: number): Promise<void> {
    if (this.appliedSeq >= seq || this.child === undefined) return Promise.resolve();
    return new Promise((resolve) => this.appliedWaiters.push({ seq, resolve }));
  }

  // ----------------------------------------------------------------------------- the copy's feed

  private onChanges(changes: InvocationChanges): void {
    for (const [id, status] of changes) {
      const before = this.pending.get(id);
      this.pendingBytes += (status?.length ?? 0) - (before?.length ?? 0);
      this.pending.set(id, status);
    }
    if (this.pending.size >= FLUSH_IDS || this.pendingBytes >= FLUSH_BYTES) {
      if (this.ready && this.seq - this.appliedSeq < MAX_UNAPPLIED) this.flush();
      else if (this.pending.size > MAX_PENDING_IDS) this.restart(`it fell behind the partitions by ${this.pending.size} invocations`);
    } else if (this.idleTimer === undefined) {
      this.idleTimer = setTimeout(() => {
        this.idleTimer = undefined;
        if (this.ready) this.flush();
      }, IDLE_FLUSH_MS);
      this.idleTimer.unref();
    }
  }

  /** Sends the changes kept so far (each invocation's latest status). */
  private flush(): void {
    if (this.pending.size === 0 || !this.ready) return;
    const records: Uint8Array[] = [];
    const deleted: string[] = [];
    for (const [id, status] of this.pending) {
      if (status === null) deleted.push(id);
      else records.push(status);
    }
    this.pending = new Map();
    this.pendingBytes = 0;
    this.send({ t: 'changes', seq: ++this.seq, records, deleted });
  }

  // ----------------------------------------------------------------------------- queries

  private pump(): void {
    while (this.ready && this.running.size < MAX_RUNNING && this.waiting.length > 0) {
      const p = this.waiting.shift()!;
      const left = p.deadline - Date.now();
      if (left <= 0) {
        this.settle(p);
        p.reject(failure({ code: 'KEEL0021', message: `the query waited longer than ${this.config.query_timeout_ms} ms (admin.query_engine.query_timeout) for the engine` }));
        continue;
      }
      this.running.set(p.qid, p);
      void this.prepare(p);
    }
    this.expireWaiting();
  }

  /**
   * Waits until every status change made durable before the query came has reached the copy's
   * feed (partition threads post theirs at the end of a turn: without this, a query could miss a
   * change its client had already seen the effect of), then reads the journals the query names
   * and sends it with them — the changes kept so far go first, so that the journals are at least
   * as new as the statuses the query sees. A wait that has not ended by the query's deadline is
   * given up: the query goes as it is (and then times out).
   */
  private async prepare(p: Pending): Promise<void> {
    const settled = this.source().settled?.();
    if (settled !== undefined) await this.beforeDeadline(p, settled);
    const ids = this.journalIdsOf(p.sql);
    let journals: Journals | undefined;
    if (ids !== undefined) {
      this.flush();
      journals = await this.beforeDeadline(p, this.readJournals(ids));
    }
    if (this.running.get(p.qid) === p) this.dispatch(p, journals);
  }

  /** `work`'s value, or undefined once the query's deadline passed or `work` failed. */
  private async beforeDeadline<T>(p: Pending, work: Promise<T>): Promise<T | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => (timer = setTimeout(resolve, Math.max(0, p.deadline - Date.now()), undefined)));
    try {
      return await Promise.race([work, late]).catch(() => undefined);
    } finally {
      clearTimeout(timer);
    }
  }

  private dispatch(p: Pending, journals?: Journals): void {
    const left = Math.max(1, p.deadline - Date.now());
    this.flush(); // the query sees every change made durable before it arrived
    this.send({ t: 'query', qid: p.qid, sql: p.sql, format: p.format, params: p.params, timeout_ms: left, limit_ms: this.config.query_timeout_ms, registry_version: this.registry.version, ...(journals ? { journals } : {}) });
    // While the copy loads the engine holds a query that reads it outside its limit: watched from copyWhole on.
    if (this.copied) this.watch(p, left);
  }

  private watch(p: Pending, limitMs: number): void {
    p.watchdog = setTimeout(() => this.overdue(p), limitMs + STOP_GRACE_MS);
  }

  /** The journal ids a text reads, when the engine told which of its shape's literals hold them. */
  private journalIdsOf(sql: string): string[] | undefined {
    if (this.journalShapes.size === 0 || !/sys_journal/i.test(sql)) return undefined;
    const shape = shapeOf(sql);
    const literals = shape === undefined ? undefined : recall(this.journalShapes, shape.key);
    if (shape === undefined || literals === undefined) return undefined;
    const ids = [...new Set(literals.map((i) => shape.literals[i]!))];
    return ids.length <= MAX_PREFETCH_IDS ? ids : undefined;
  }

  /** Queries waiting for an engine that is not ready fail at their deadline; those waiting for its copy wait. */
  private expireWaiting(): void {
    if (this.ready || this.waiting.length === 0 || this.expiry !== undefined) return;
    const next = Math.min(...this.waiting.map((p) => p.deadline)) - Date.now();
    this.expiry = setTimeout(() => {
      this.expiry = undefined;
      if (this.ready) return; // started meanwhile: pump sends them, or refuses those past their deadline
      const now = Date.now();
      for (const p of this.waiting.filter((w) => w.deadline <= now)) {
        this.waiting.splice(this.waiting.indexOf(p), 1);
        this.settle(p);
        p.reject(unavailable('it is starting or restarting and was not ready within the query time limit'));
      }
      this.expireWaiting();
    }, Math.max(10, next));
    this.expiry.unref();
  }

  private overdue(p: Pending): void {
    if (!this.running.has(p.qid)) return;
    this.fail(p, failure({ code: 'KEEL0021', message: `the query ran longer than ${this.config.query_timeout_ms} ms (admin.query_engine.query_timeout) and the engine did not stop it` }));
    this.restart(`a query outlived its time limit by ${STOP_GRACE_MS} ms`);
  }

  private settle(p: Pending): void {
    clearTimeout(p.watchdog);
    if (p.onAbort) p.signal?.removeEventListener('abort', p.onAbort);
    this.running.delete(p.qid);
  }

  private fail(p: Pending, err: Error): void {
    const streaming = p.onChunk !== undefined;
    this.settle(p);
    if (streaming) p.onChunk!({ t: 'chunk', qid: p.qid, chunk: new Uint8Array(0), more: false });
    else p.reject(err);
    this.pump();
  }

  private abort(p: Pending): void {
    const i = this.waiting.indexOf(p);
    if (i >= 0) this.waiting.splice(i, 1);
    if (this.running.has(p.qid)) this.send({ t: 'cancel', qid: p.qid });
    this.settle(p);
    // An answer being streamed is ended: its reader throws why (`stream`).
    if (p.onChunk !== undefined) p.onChunk({ t: 'chunk', qid: p.qid, chunk: new Uint8Array(0), more: false });
    else p.reject(failure(abandoned(p.signal?.reason)));
    this.pump();
  }

  private onAnswer(m: Extract<FromEngine, { t: 'answer' }>): void {
    const p = this.running.get(m.qid);
    if (p === undefined) return;
    clearTimeout(p.watchdog);
    const head = m.head ? { head: m.head } : {};
    if (!m.more) {
      this.settle(p);
      const whole: Whole = { rows: m.rows, ...head, chunk: m.chunk };
      if (m.constant && m.chunk.length + (m.head?.length ?? 0) <= MAX_CONSTANT_BYTES) keep(this.constants, constantKey(p.sql, p.format, p.params), whole, MAX_CONSTANTS);
      p.resolve(wholeAnswer(whole));
      this.pump();
      return;
    }
    p.resolve({ rows: m.rows, ...head, body: this.stream(p, m.chunk) });
  }

  /** The rest of an answer, one chunk at a time as the consumer reads (memory stays at a chunk). */
  private async *stream(p: Pending, first: Uint8Array): AsyncGenerator<Uint8Array> {
    try {
      yield first;
      const cutOff = (): Error => (p.signal?.aborted ? failure(abandoned(p.signal.reason)) : unavailable('the answer was cut off (the query engine restarted)'));
      for (;;) {
        if (!this.running.has(p.qid)) throw cutOff();
        const next = await new Promise<Extract<FromEngine, { t: 'chunk' }>>((resolve) => {
          p.onChunk = resolve;
          this.send({ t: 'more', qid: p.qid });
        });
        if (next.chunk.length === 0 && !next.more && !this.running.has(p.qid)) throw cutOff();
        yield next.chunk;
        if (!next.more) return;
      }
    } finally {
      if (this.running.has(p.qid)) this.send({ t: 'cancel', qid: p.qid });
      this.settle(p);
      this.pump();
    }
  }

  private async serveRows(qid: number, table: string, filter: TableFilter): Promise<void> {
    const rowsOf = PER_QUERY_TABLES[table];
    const rows: Row[] = [];
    let bytes = 0;
    try {
      if (rowsOf !== undefined) {
        for await (const r of rowsOf({ source: this.source(), registry: this.registry }, filter)) {
          rows.push(r);
          bytes += rowBytes(r);
          if (bytes > this.config.max_result_bytes) {
            this.send({ t: 'rows', qid, table, rows: [], error: { code: 'KEEL0022', message: `the query reads more than ${this.config.max_result_bytes} bytes of ${table} (admin.query_engine.max_result_bytes): filter it by service_name and service_key` } });
            return;
          }
        }
      }
      this.send({ t: 'rows', qid, table, rows });
    } catch (err) {
      this.send({ t: 'rows', qid, table, rows: [], error: { code: 'KEEL0023', message: `${table} could not be read: ${(err as Error).message}` } });
    }
  }

  private async serveJournals(qid: number, ids: string[]): Promise<void> {
    this.send({ t: 'journals', qid, journals: await this.readJournals(ids) });
  }

  private async readJournals(ids: string[]): Promise<Journals> {
    const src = this.source();
    return Promise.all(ids.map(async (id): Promise<Journals[number]> => [id, await src.journalEntries(id).catch(() => []), await src.stepAttempts?.(id)]));
  }
}
