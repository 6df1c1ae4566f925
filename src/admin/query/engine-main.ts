// The query engine process: DuckDB, a copy of every invocation status kept up to date from the
// server, and the queries, each on a connection of its own with a time limit and row and byte
// limits. A separate process (not a worker thread) so that nothing a query does — CPU, memory,
// the libuv thread pool DuckDB's async calls run on, a crash — reaches the event loop or the
// thread pool that serve ingress, admin and the partitions' store. Started by engine.ts.

import { randomBytes } from 'node:crypto';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance, type DuckDBConnection, type DuckDBResult } from '@duckdb/node-api';
import { PER_QUERY_TABLES, REGISTRY_TABLES, TABLES, rowBytes, type Row, type TableFilter } from '../introspection.js';
import { appendRows } from './append.js';
import { analyze, treeText, type Ast } from './analyze.js';
import { cell, encoder, kindOf, loadArrow, rechunk, type Cell, type Column } from './encode.js';
import { journalRows } from './journal-rows.js';
import { keep, recall } from './lru.js';
import { CLIENT_LEFT, type EngineOptions, type Format, type FromEngine, type Journals, type QueryError, type ToEngine } from './protocol.js';
import { COPY_TABLE, COPY_VIEWS, PER_QUERY, copyRowsFrom, literal, perQueryTableSql, schemaSql } from './schema.js';
import { IdFilter } from './id-filter.js';
import { assert } from '../../common/assert.js';
import { markedText, markersAreConstants, shapeOf, type Shape } from './shape.js';

/** Below every thread of the server: under CPU contention, ingress and admin go first. */
const NICE = 10;
/** Bytes of an answer per IPC message: the server streams them out one at a time. */
const CHUNK_BYTES = 1 << 20;
/** Journals asked of the server per message when a query reads many. */
const JOURNALS_PER_REQUEST = 256;
/** The largest JSON document a file the engine loads may hold (DuckDB's reader buffers twice that). */
const MAX_OBJECT_BYTES = 4 * 1024 * 1024;
/** The copy's index on id, kept while the copy holds at most admin.query_engine.indexed_statuses (fitIndex). */
const COPY_ID_INDEX = 'keel_invocation_id';
/** The index is dropped past this many times indexed_statuses: a copy near the line does not build and drop it at each forget. */
const INDEX_DROP_FACTOR = 1.25;
/**
 * Statuses longer than this are slimmed before they are loaded: the output value and the lists
 * of callers and children are not shown by any column, and can be as large as a message.
 */
const SLIM_STATUS_BYTES = 64 * 1024;
const LONG_TEXT_CHARS = 16 * 1024;

let options: EngineOptions;
let db: DuckDBInstance;
let copy: DuckDBConnection;
/** Every change message received so far has been applied when this resolves (they apply in order). */
let applied: Promise<void> = Promise.resolve();
let loaded: Promise<void> = new Promise(() => {});
let markLoaded: () => void = () => {};
let loading = false;
/** The copy is loaded (`loaded` has resolved): a query that reads it does not wait. */
let copyWhole = false;
/** Ids the copy's older rows (all but `recent`) may hold; undefined while the copy loads (then it may hold any). */
let settledIds: IdFilter | undefined;
/** Rows written since the copy loaded or was last forgotten: id → rowid (at most admin.query_engine.recent_statuses, then forgotten). */
const recent = new Map<string, bigint>();
/** The highest rowid of the copy: rows appended later have higher ones. */
let lastRowid = -1n;
/** Ids deleted from the older rows since `recent` was last forgotten (at most admin.query_engine.recent_statuses). */
const leftOlder = new Set<string>();
/** Whether the copy has its index on id now (fitIndex). */
let indexed = false;
/**
 * The latest created_at (ms) of the older rows when they became older. An invocation's created_at
 * never changes, so one created later has no older row.
 */
let olderNewestMs = Infinity;
let loadStarted = 0;
const queries = new Map<number, Query>();
/** What the parser said of a query text: the text to run, the tables to fill, whether its answer can be kept. */
interface Parsed {
  text: string;
  tables: Map<string, TableFilter>;
  cacheable: boolean;
  /** The text to run is DuckDB's rendering of a rewritten tree, not the query's own. */
  rewritten: boolean;
}
/** What the parser said of recent query texts that have no shape, or whose shape has no template. */
const parsed = new Map<string, Parsed>();
/** Templates of recent shapes (shape.ts), by shape key; null: the shape's texts are parsed one by one. */
const templates = new Map<string, Parsed | null>();
const MAX_PARSED = 256;
const MAX_PARSED_CHARS = 16 * 1024;
/** Functions whose every overload DuckDB marks CONSISTENT (same arguments, same result, always). */
let consistentFunctions = new Set<string>();

const send = (m: FromEngine): void => {
  process.send?.(m);
};
const log = (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>, code?: string): void =>
  send({ t: 'log', level, msg, ...(fields ? { fields } : {}), ...(code ? { code } : {}) });

class QueryFailure extends Error {
  constructor(readonly error: QueryError) {
    super(error.message);
  }
}
const refused = (message: string) => new QueryFailure({ code: 'KEEL0020', message });
const tooLarge = (message: string) => new QueryFailure({ code: 'KEEL0022', message });

// ------------------------------------------------------------------------------- start

/** Every thread of this process below the server's (Linux: the nice value is per thread). */
function lowerPriority(): void {
  try {
    for (const tid of readdirSync('/proc/self/task')) setPriority(Number(tid), NICE);
  } catch {
    try {
      setPriority(NICE);
    } catch {
      // not permitted here: run at normal priority
    }
  }
}

async function start(o: EngineOptions): Promise<void> {
  assert(Number.isSafeInteger(o.recent_statuses) && o.recent_statuses > 0, () => `the engine's recent_statuses is ${o.recent_statuses}`);
  assert(Number.isSafeInteger(o.indexed_statuses) && o.indexed_statuses >= 0, () => `the engine's indexed_statuses is ${o.indexed_statuses}`);
  options = o;
  // In memory: the copy is rebuilt at every start, so it needs no file, no WAL and no fsync;
  // past memory_limit DuckDB moves its blocks to temp_directory (memory stays bounded).
  db = await DuckDBInstance.create(':memory:', {
    threads: String(o.threads),
    memory_limit: `${Math.floor(o.memory_limit_bytes / (1024 * 1024))}MiB`,
    temp_directory: join(o.dir, 'spill'),
    max_temp_directory_size: `${Math.max(1024, Math.floor((4 * o.memory_limit_bytes) / (1024 * 1024)))}MiB`,
    autoinstall_known_extensions: 'false',
    autoload_known_extensions: 'false',
    preserve_insertion_order: 'false',
  });
  copy = await db.connect();
  for (const sql of schemaSql()) await copy.run(sql);
  const consistent = await copy.runAndReadAll(
    "SELECT function_name FROM duckdb_functions() GROUP BY function_name HAVING bool_and(coalesce(stability, '') = 'CONSISTENT')",
  );
  consistentFunctions = new Set(consistent.getRows().map((r) => String(r[0]).toLowerCase()));
  // From here on nothing reads or writes a file outside the engine's directory: not the
  // queries (refused before they run, and DuckDB refuses too), not extensions.
  await copy.run(`SET allowed_directories = [${literal(o.dir + '/')}]`);
  await copy.run('SET enable_external_access = false');
  lowerPriority();
  refillSpares();
  send({ t: 'ready' });
  void loadArrow();
}

// ------------------------------------------------------------------------------- the copy

function writeLines(file: string, lines: readonly Uint8Array[]): void {
  const nl = Buffer.from('\n');
  writeFileSync(file, Buffer.concat(lines.flatMap((l) => [l, nl])));
}

/** A status without what no column shows, and long texts cut: every status fits the reader. */
function slim(record: Uint8Array): Uint8Array {
  if (record.length <= SLIM_STATUS_BYTES) return record;
  try {
    const s = JSON.parse(Buffer.from(record.buffer, record.byteOffset, record.byteLength).toString('utf8')) as Record<string, unknown>;
    for (const k of ['output', 'attachers', 'children', 'waiting']) delete s[k];
    const result = s.result as { value?: string; failure?: { message?: string } } | undefined;
    if (result) {
      delete result.value;
      if (result.failure?.message) result.failure.message = result.failure.message.slice(0, LONG_TEXT_CHARS);
    }
    const lf = s.last_failure as { message?: string } | undefined;
    if (lf?.message) lf.message = lf.message.slice(0, LONG_TEXT_CHARS);
    return Buffer.from(JSON.stringify(s));
  } catch {
    return record; // staged in halves below, and skipped if unreadable
  }
}

/** The changed statuses in temp.staging, in the copy's columns. */
async function stage(file: string, raw: readonly Uint8Array[]): Promise<number> {
  const records = raw.map(slim);
  await copy.run(`CREATE OR REPLACE TEMP TABLE staging AS SELECT * FROM ${COPY_TABLE} LIMIT 0`);
  const skipped = await stageHalves(file, records, true);
  if (skipped > 0) log('warn', `${skipped} invocation statuses cannot be shown by queries (unreadable records)`, { skipped }, 'KEEL0023');
  return records.length;
}

/**
 * Adds `records` to temp.staging; resolves to those skipped. A record DuckDB cannot read, or a
 * batch past the engine's memory, must not cost the others: halves, down to single records.
 * (One by one, 16,384 changes to a copy of 2,000,000 statuses held the engine's CPU for a minute.)
 */
async function stageHalves(file: string, records: readonly Uint8Array[], whole = false): Promise<number> {
  if (records.length === 0) return 0;
  writeLines(file, records);
  try {
    await copy.run(`INSERT INTO temp.staging ${copyRowsFrom(file, MAX_OBJECT_BYTES)}`);
    return 0;
  } catch (err) {
    if (whole) log('warn', 'a batch of invocation statuses could not be read at once; reading it in halves', { err: (err as Error).message, records: records.length }, 'KEEL0023');
    if (records.length === 1) return 1;
    const half = records.length >> 1;
    return (await stageHalves(file, records.slice(0, half))) + (await stageHalves(file, records.slice(half)));
  }
}

/** The records of a chunk of lines (views into it, no copy). */
function splitLines(lines: Uint8Array): Buffer[] {
  const buf = Buffer.from(lines.buffer, lines.byteOffset, lines.byteLength);
  const records: Buffer[] = [];
  for (let start = 0; start < buf.length; ) {
    const nl = buf.indexOf(0x0a, start);
    const end = nl < 0 ? buf.length : nl;
    if (end > start) records.push(buf.subarray(start, end));
    start = end + 1;
  }
  return records;
}

/** A chunk of the initial scan: statuses no change has touched since load-begin, read straight into the copy. */
async function applyLoad(lines: Uint8Array, file: string): Promise<void> {
  const records = splitLines(lines);
  if (records.some((r) => r.length > SLIM_STATUS_BYTES)) writeLines(file, records.map(slim));
  else writeFileSync(file, lines);
  try {
    await copy.run(`INSERT INTO ${COPY_TABLE} SELECT r.* FROM (${copyRowsFrom(file, MAX_OBJECT_BYTES)}) r ANTI JOIN temp.seen USING (id)`);
  } catch {
    await stage(file, records); // in halves: an unreadable status costs only itself
    await copy.run(`INSERT INTO ${COPY_TABLE} SELECT s.* FROM temp.staging s ANTI JOIN temp.seen USING (id)`);
  }
}

/**
 * Changes of durable batches: each status replaces the copy's, purged ones leave it, at a cost
 * that follows the batch, not the copy: a row written since the last `forgetRecent` is deleted by
 * its rowid (DuckDB skips to its row group), an older one by its id (a scan of the ids) only when
 * the filter of older ids says it may be there — for the invocations that start and end between
 * two forgets, never. (A semi-join of every batch against a copy of 2,200,000 statuses, past the
 * engine's memory limit, held a core for 8 s per 6,000 changes.)
 */
async function applyUpdates(m: Extract<ToEngine, { t: 'changes' }>, file: string): Promise<void> {
  if (m.records.length > 0) await stage(file, m.records);
  const rows = m.records.length > 0 ? (await copy.runAndReadAll('SELECT id, epoch_ms(created_at) FROM temp.staging')).getRows() : [];
  const staged = rows.map((r) => String(r[0]));
  const deleted = m.deleted.map(literal).join(', ');
  await copy.run('BEGIN TRANSACTION');
  try {
    if (loading) {
      // The filter is made when the load ends; until then any id may be in the copy.
      if (m.records.length > 0) await copy.run(`DELETE FROM ${COPY_TABLE} WHERE id IN (SELECT id FROM temp.staging)`);
      if (deleted !== '') await copy.run(`DELETE FROM ${COPY_TABLE} WHERE id IN (${deleted})`);
      if (m.records.length > 0) await copy.run('INSERT INTO temp.seen SELECT id FROM temp.staging');
      if (deleted !== '') await copy.run(`INSERT INTO temp.seen VALUES ${m.deleted.map((id) => `(${literal(id)})`).join(', ')}`);
    } else {
      // An invocation created after every status the older rows hold has none of them: no search.
      const newer = new Set(rows.filter((r) => r[1] !== null && Number(r[1]) > olderNewestMs).map((r) => String(r[0])));
      await removeRows([...staged, ...m.deleted], newer);
    }
    if (m.records.length > 0) await copy.run(`INSERT INTO ${COPY_TABLE} SELECT * FROM temp.staging`);
    await copy.run('COMMIT');
  } catch (err) {
    await copy.run('ROLLBACK').catch(() => {});
    throw err;
  }
  if (loading || staged.length === 0) return;
  await rememberNewRows(staged);
  if (recent.size > options.recent_statuses) await forgetRecent();
}

/** Deletes the rows of `ids` (within the caller's transaction); each id has at most one, and none of `newer` is an older row. */
async function removeRows(ids: readonly string[], newer: ReadonlySet<string>): Promise<void> {
  const filter = settledIds;
  assert(filter !== undefined, 'rows are removed by rowid only once the copy is loaded');
  const byRowid: Array<[string, bigint]> = [];
  const byId: string[] = [];
  for (const id of ids) {
    const rowid = recent.get(id);
    if (rowid !== undefined) {
      byRowid.push([id, rowid]);
      recent.delete(id);
    } else if (!newer.has(id) && filter.mayHave(id) && !leftOlder.has(id)) byId.push(id);
  }
  if (byRowid.length > 0) {
    // The id is checked too: should DuckDB ever move a row, it is deleted by its id below instead.
    const gone = await copy.runAndReadAll(
      `DELETE FROM ${COPY_TABLE} WHERE rowid IN (${byRowid.map(([, r]) => r).join(', ')}) AND id IN (${byRowid.map(([id]) => literal(id)).join(', ')}) RETURNING id`,
    );
    const found = new Set(gone.getRows().map((r) => String(r[0])));
    for (const [id] of byRowid) if (!found.has(id)) byId.push(id);
  }
  if (byId.length === 0) return;
  await copy.run(`DELETE FROM ${COPY_TABLE} WHERE id IN (${byId.map(literal).join(', ')})`);
  // A long-running invocation changes in batch after batch: the older rows are searched for it once.
  if (leftOlder.size + byId.length > options.recent_statuses) leftOlder.clear();
  for (const id of byId) leftOlder.add(id);
}

/** The rowids of the rows of `ids` just inserted (appends take rowids past every earlier one). */
async function rememberNewRows(ids: readonly string[]): Promise<void> {
  const rows = await copy.runAndReadAll(`SELECT id, rowid FROM ${COPY_TABLE} WHERE rowid > ${lastRowid}`);
  for (const [id, rowid] of rows.getRows()) {
    const r = BigInt(rowid as bigint | number);
    recent.set(String(id), r);
    if (r > lastRowid) lastRowid = r;
  }
  // Should an append ever take a lower rowid, its row is found by id instead: never left behind.
  if (rows.getRows().length === ids.length) return;
  for (const id of ids) {
    if (recent.has(id)) continue;
    settledIds!.add(id);
    leftOlder.delete(id);
  }
  olderNewestMs = await newestCreatedMs();
}

/** The recent rows join the older ones: their ids go to the filter, their rowids are forgotten. */
async function forgetRecent(): Promise<void> {
  const filter = settledIds;
  assert(filter !== undefined && !loading, 'recent rows are forgotten only once the copy is loaded');
  for (const id of recent.keys()) filter.add(id);
  recent.clear();
  leftOlder.clear();
  olderNewestMs = await newestCreatedMs();
  // Past its size the filter answers "maybe" more and more often (and keeps purged ids): made again
  // from the copy's ids, for twice as many.
  if (filter.added > 2 * filter.sizedFor) await fillSettledIds();
  await fitIndex();
}

/** A filter of every id of the copy, sized for twice as many; the last rowid. */
async function fillSettledIds(): Promise<void> {
  const count = await copyRows();
  const filter = new IdFilter(Math.max(options.recent_statuses, 2 * count));
  const result = await copy.stream(`SELECT id FROM ${COPY_TABLE}`);
  for (;;) {
    const chunk = await result.fetchChunk();
    if (chunk === null || chunk.rowCount === 0) break;
    for (const id of chunk.getColumnVector(0).toArray()) filter.add(String(id));
  }
  const last = (await copy.runAndReadAll(`SELECT max(rowid) FROM ${COPY_TABLE}`)).getRows()[0]![0];
  if (last !== null && BigInt(last as bigint) > lastRowid) lastRowid = BigInt(last as bigint);
  settledIds = filter;
  olderNewestMs = await newestCreatedMs();
}

const newestCreatedMs = async (): Promise<number> => {
  const [newest, undated] = (await copy.runAndReadAll(`SELECT epoch_ms(max(created_at)), count(*) FILTER (WHERE created_at IS NULL) FROM ${COPY_TABLE}`)).getRows()[0]!;
  // A row without a creation time (none is written without one) makes every id worth a search.
  if (Number(undated) > 0) return Infinity;
  return newest === null ? -Infinity : Number(newest);
};

const copyRows = async (): Promise<number> => Number((await copy.runAndReadAll(`SELECT count(*) FROM ${COPY_TABLE}`)).getRows()[0]![0]);

/**
 * An index on id while the copy is small enough for it (a lookup by id, `restate invocations
 * describe`, reads one row), none past that: DuckDB keeps an index in memory whole (163 MB for
 * 2,200,000 ids), and without one a lookup scans the ids (30 ms for 2,500,000 here).
 */
async function fitIndex(): Promise<void> {
  const count = await copyRows();
  if (!indexed && count <= options.indexed_statuses && options.indexed_statuses > 0) {
    await copy.run(`CREATE INDEX ${COPY_ID_INDEX} ON ${COPY_TABLE} (id)`);
    indexed = true;
  } else if (indexed && count > options.indexed_statuses * INDEX_DROP_FACTOR) {
    await copy.run(`DROP INDEX ${COPY_ID_INDEX}`);
    indexed = false;
  }
}

async function applyChanges(m: Extract<ToEngine, { t: 'changes' | 'load' }>): Promise<void> {
  const file = join(options.dir, `copy-${m.seq}.json`);
  try {
    if (m.t === 'load') {
      if (m.lines.length > 0) await applyLoad(m.lines, file);
    } else await applyUpdates(m, file);
  } finally {
    rmSync(file, { force: true });
  }
  send({ t: 'applied', seq: m.seq });
}

async function beginLoad(): Promise<void> {
  loading = true;
  loadStarted = Date.now();
  copyWhole = false;
  loaded = new Promise((resolve) => (markLoaded = resolve));
  settledIds = undefined;
  recent.clear();
  leftOlder.clear();
  lastRowid = -1n;
  olderNewestMs = Infinity;
  if (indexed) await copy.run(`DROP INDEX ${COPY_ID_INDEX}`);
  indexed = false;
  await copy.run(`DELETE FROM ${COPY_TABLE}`);
  await copy.run('CREATE OR REPLACE TEMP TABLE seen (id VARCHAR)');
}

async function endLoad(seq: number): Promise<void> {
  await copy.run('DROP TABLE IF EXISTS temp.seen');
  await copy.run('DROP TABLE IF EXISTS temp.staging');
  loading = false;
  await fillSettledIds();
  // Built once the copy is loaded (1.1 s for 1,000,000 ids; kept up during the load it would cost each insert).
  await fitIndex();
  log('info', 'query engine: copy of the invocation statuses loaded', { invocations: await copyRows(), indexed, load_ms: Date.now() - loadStarted });
  copyWhole = true;
  markLoaded();
  send({ t: 'applied', seq });
}

/** Changes apply one after the other; a copy that cannot follow them is rebuilt by a restart. */
function chain(step: () => Promise<void>): void {
  applied = applied.then(step).catch((err) => {
    log('error', `query engine: the copy of the invocation statuses could not be updated: restarting (${(err as Error).message})`, {}, 'KEEL0023');
    process.exit(70);
  });
}

// ------------------------------------------------------------------------------- queries

type Stop = 'timeout' | 'rows' | 'bytes' | 'client';

class Query {
  conn: DuckDBConnection | undefined;
  stop: Stop | undefined;
  timer: NodeJS.Timeout | undefined;
  rest: Uint8Array[] = [];
  rows = new Map<string, (m: Extract<ToEngine, { t: 'rows' }>) => void>();
  journals: ((m: Extract<ToEngine, { t: 'journals' }>) => void) | undefined;
  /** Journals the server sent with the query (see `journal-ids`). */
  prefetched: Journals | undefined;
  /**
   * Rejects once the query is stopped: whatever it waits for (rows from the server, the copy's
   * load, a refill others wait behind) is given up then, not awaited for ever.
   */
  readonly halted: Promise<never>;
  private onHalt: (err: Error) => void = () => {};

  constructor(readonly qid: number, readonly limit_ms: number) {
    this.halted = new Promise<never>((_, reject) => (this.onHalt = reject));
    this.halted.catch(() => {});
  }

  halt(why: Stop): void {
    this.stop ??= why;
    this.conn?.interrupt();
    this.onHalt(new Error('INTERRUPT Error: Interrupted!'));
  }

  check(): void {
    if (this.stop !== undefined) throw new Error('INTERRUPT Error: Interrupted!');
  }

  /** `p`, unless the query is stopped first. */
  unlessHalted<T>(p: Promise<T>): Promise<T> {
    return Promise.race([p, this.halted]);
  }
}

function need(q: Query, table: string, filter: TableFilter): Promise<Row[]> {
  return q.unlessHalted(
    new Promise((resolve, reject) => {
      q.rows.set(table, (m) => (m.error ? reject(new QueryFailure(m.error)) : resolve(m.rows)));
      send({ t: 'need', qid: q.qid, table, filter });
    }),
  );
}

function needJournals(q: Query, ids: string[]): Promise<Journals> {
  return q.unlessHalted(
    new Promise((resolve) => {
      q.journals = (m) => resolve(m.journals);
      send({ t: 'need-journals', qid: q.qid, ids });
    }),
  );
}

/** The rows of one per-query table, counted against the byte limit of what one query reads. */
class RowSet {
  readonly rows: Row[] = [];
  bytes = 0;

  constructor(private readonly table: string) {}

  add(rows: readonly Row[]): void {
    for (const r of rows) {
      this.bytes += rowBytes(r);
      this.rows.push(r);
    }
    if (this.bytes > options.max_result_bytes) {
      throw tooLarge(`the query reads more than ${options.max_result_bytes} bytes of ${this.table} (admin.query_engine.max_result_bytes): filter it${this.table === 'sys_journal' ? ' by id' : this.table === 'state' ? ' by service_name and service_key' : ''}`);
    }
  }
}

async function journalIds(q: Query, filter: TableFilter, connecting: Promise<DuckDBConnection>): Promise<string[]> {
  if (filter.id !== undefined) return [...filter.id];
  await waitLoaded(q);
  const r = await (await connecting).runAndReadAll(`SELECT id FROM ${COPY_TABLE} WHERE coalesce(journal_size, 0) > 0 ORDER BY id`);
  return r.getRows().map((row) => String(row[0]));
}

/** The journals sent with the query, when they are exactly those its filter names. */
function prefetchedFor(q: Query, filter: TableFilter): Journals | undefined {
  if (q.prefetched === undefined || filter.id === undefined) return undefined;
  const wanted = new Set(filter.id);
  return q.prefetched.length === wanted.size && q.prefetched.every(([id]) => wanted.has(id)) ? q.prefetched : undefined;
}

async function loadJournal(q: Query, filter: TableFilter, rows: RowSet, connecting: Promise<DuckDBConnection>): Promise<void> {
  const sent = prefetchedFor(q, filter);
  if (sent !== undefined) {
    for (const [id, entries, steps] of sent) rows.add(journalRows(id, entries, steps));
    return;
  }
  const ids = await journalIds(q, filter, connecting);
  for (let i = 0; i < ids.length; i += JOURNALS_PER_REQUEST) {
    q.check();
    for (const [id, entries, steps] of await needJournals(q, ids.slice(i, i + JOURNALS_PER_REQUEST))) rows.add(journalRows(id, entries, steps));
  }
}

/**
 * Fills the temp tables of this query's connection for the per-query tables it names. Their rows
 * come from the server while the connection is made and the tables are created: an IPC round
 * trip and DuckDB calls that each cost a millisecond or two, no longer one after the other.
 */
async function loadTables(q: Query, tables: Map<string, TableFilter>, connecting: Promise<DuckDBConnection>): Promise<void> {
  // vqueues are declared and always empty here: nothing to fill.
  const filled = [...tables].filter(([table]) => !COPY_VIEWS.has(table) && !REGISTRY_TABLES.has(table) && (table === 'sys_journal' || PER_QUERY_TABLES[table] !== undefined));
  const created = connecting.then(async (conn) => {
    for (const [table] of filled) if (!PREMADE_TABLES.has(table)) await conn.run(perQueryTableSql(table));
    return conn;
  });
  created.catch(() => {}); // awaited below; a failure there ends the query
  for (const [table, filter] of filled) {
    const rows = new RowSet(table);
    if (table === 'sys_journal') await loadJournal(q, filter, rows, connecting);
    else rows.add(await need(q, table, filter));
    q.check();
    await appendRows(await created, table, TABLES[table]!, rows.rows);
  }
  await created;
}

/** The registry's version each REGISTRY_TABLES table in `public` was filled at. */
const registryFilled = new Map<string, number>();
/** Refills of the registry tables, one after the other. */
let registryRefills: Promise<void> = Promise.resolve();

/**
 * Refills the registry tables the query names that are older than the registry version it was
 * sent with. Readers on other connections see the old rows or the new ones, never a mix.
 */
async function keepRegistryTables(q: Query, tables: Map<string, TableFilter>, version: number, connecting: Promise<DuckDBConnection>): Promise<void> {
  const stale = (table: string) => REGISTRY_TABLES.has(table) && (registryFilled.get(table) ?? -1) < version;
  if (![...tables.keys()].some(stale)) return;
  // The refill waits behind others' and for the server's rows: a query stopped meanwhile gives it up.
  const refill = q.unlessHalted(registryRefills).then(async () => {
    for (const table of [...tables.keys()].filter(stale)) {
      const rows = new RowSet(table);
      rows.add(await need(q, table, {}));
      const conn = await connecting;
      await conn.run('BEGIN TRANSACTION');
      try {
        await conn.run(`DELETE FROM public.${table}`);
        await appendRows(conn, table, TABLES[table]!, rows.rows, 'public');
        await conn.run('COMMIT');
      } catch (err) {
        await conn.run('ROLLBACK').catch(() => {});
        throw err;
      }
      registryFilled.set(table, version);
    }
  });
  registryRefills = refill.catch(() => {});
  await refill;
}

/**
 * Waits for the copy outside the query's time limit, which starts again once the copy is whole: the
 * first query after the engine starts (admin.query_engine.idle_timeout) waits for a copy of however
 * many statuses, and its limit is for its own work. A client that leaves still stops the wait.
 */
async function waitLoaded(q: Query): Promise<void> {
  if (copyWhole) return;
  clearTimeout(q.timer);
  await q.unlessHalted(loaded);
  q.timer = setTimeout(() => q.halt('timeout'), q.limit_ms);
}

/**
 * What the parser says of `sql`: from the template of its shape when one is kept (shape.ts), else
 * parsed, the shape's template made on the way when its literals prove to be only constants.
 */
async function parse(q: Query, sql: string): Promise<Parsed> {
  const shape = sql.length <= MAX_PARSED_CHARS ? shapeOf(sql) : undefined;
  if (shape !== undefined && !sql.includes(MARK_TAG)) {
    let template = recall(templates, shape.key);
    if (template === undefined) {
      template = await makeTemplate(q, shape);
      if (q.stop === undefined) {
        keep(templates, shape.key, template, MAX_PARSED);
        if (template !== null) tellJournalIds(shape.key, template);
      }
    }
    if (template !== null) return instantiate(template, sql, shape);
  }
  const known = recall(parsed, sql);
  if (known !== undefined) return known;
  const result = (await parseAnew(q, sql))!;
  if (sql.length <= MAX_PARSED_CHARS) keep(parsed, sql, result, MAX_PARSED);
  return result;
}

/** In every marker: no query text holds it (one that does gets no template). */
const MARK_TAG = `kq${randomBytes(8).toString('hex')}`;
const mark = (i: number): string => `${MARK_TAG}m${i}z`;
const MARKED = new RegExp(`'${MARK_TAG}m(\\d+)z'`, 'g');

/**
 * The parse of `shape` with markers for its literals, or null when that is not the parse of every
 * text of the shape (the markers are not all plain constants, or the marked text does not parse):
 * those texts are parsed one by one. A text of the shape that is wrong in itself throws here.
 */
async function makeTemplate(q: Query, shape: Shape): Promise<Parsed | null> {
  if (shape.literals.length === 0) return (await parseAnew(q, markedText(shape, mark)))!;
  const markers = shape.literals.map((_, i) => mark(i));
  try {
    const template = await parseAnew(q, markedText(shape, mark), (tree) => markersAreConstants(tree, markers, MARK_TAG));
    if (template === undefined || (template.text.match(MARKED)?.length ?? 0) !== markers.length) return null;
    return template;
  } catch {
    return null;
  }
}

/** Which literal a marker stands for; undefined for any other value. */
function markerIndex(v: string): number | undefined {
  const i = v.startsWith(MARK_TAG) ? Number(/m(\d+)z$/.exec(v)?.[1]) : NaN;
  return Number.isInteger(i) ? i : undefined;
}

/**
 * When every id a template's sys_journal filter names is one of its literals, tells the server
 * which: it then reads those journals as it sends each text of the shape, and the query does not
 * wait for a round trip to ask for them (`restate invocations describe` reads one each time).
 */
function tellJournalIds(key: string, template: Parsed): void {
  const ids = template.tables.get('sys_journal')?.id;
  if (ids === undefined || ids.length === 0) return;
  const literals = ids.map(markerIndex);
  if (literals.some((i) => i === undefined)) return;
  send({ t: 'journal-ids', key, literals: [...new Set(literals as number[])] });
}

/** A template with this text's literals in place of its markers. */
function instantiate(template: Parsed, sql: string, shape: Shape): Parsed {
  if (shape.literals.length === 0) return template;
  const value = (v: string): string => {
    const i = markerIndex(v);
    return i !== undefined ? shape.literals[i]! : v;
  };
  const tables = new Map<string, TableFilter>();
  for (const [table, filter] of template.tables) {
    tables.set(table, Object.fromEntries(Object.entries(filter).map(([column, values]) => [column, values.map(value)])));
  }
  const text = template.rewritten ? template.text.replace(MARKED, (_, i: string) => literal(shape.literals[Number(i)]!)) : sql;
  return { text, tables, cacheable: template.cacheable, rewritten: template.rewritten };
}

/**
 * DuckDB's parse of `sql`; undefined when `accept` turns its tree down. Throws the query's
 * error (KEEL0010, KEEL0020) for a text that is not one SELECT DuckDB can read.
 */
async function parseAnew(q: Query, sql: string, accept?: (tree: Ast) => boolean): Promise<Parsed | undefined> {
  const conn = (q.conn ??= await takeConnection());
  // DuckDB's parser reads the query once: a parse error, a statement that is not a SELECT, or
  // several statements all show in this one answer.
  const serialized = await conn.runAndReadAll('SELECT json_serialize_sql($1::VARCHAR)', [sql]);
  const tree = JSON.parse(String(serialized.getRows()[0]![0])) as { error?: boolean; error_message?: string; statements?: Ast[] };
  if (tree.error) {
    const first = /^\s*\(*\s*([A-Za-z]+)/.exec(sql)?.[1]?.toUpperCase() ?? '';
    if (/Only SELECT statements/i.test(tree.error_message ?? '')) throw refused(`${first} is not allowed: queries are read-only, one SELECT over the introspection tables`);
    const message = tree.error_message ?? 'the query cannot be read';
    throw new QueryFailure({ code: 'KEEL0010', message: /^[A-Za-z ]+ Error: /.test(message) ? message : `Parser Error: ${message}` });
  }
  const count = tree.statements?.length ?? 0;
  if (count === 0) throw new QueryFailure({ code: 'KEEL0010', message: 'the query is empty' });
  if (count > 1) throw refused(`the query holds ${count} statements: send one SELECT per query`);
  if (accept !== undefined && !accept(tree as Ast)) return undefined;
  const wanted = new Set([...PER_QUERY, ...COPY_VIEWS]);
  const analysis = analyze(tree as Ast, wanted);
  if (analysis.refusal !== undefined) throw refused(analysis.refusal);
  const cacheable = analysis.catalog && analysis.tables.size === 0 && !analysis.tableFunctions && [...analysis.functions].every((f) => consistentFunctions.has(f));
  if (!analysis.rewritten) return { text: sql, tables: analysis.tables, cacheable, rewritten: false };
  const back = await conn.runAndReadAll('SELECT json_deserialize_sql($1::JSON)', [treeText(tree as Ast)]);
  return { text: String(back.getRows()[0]![0]), tables: analysis.tables, cacheable, rewritten: true };
}

async function encodeAnswer(q: Query, result: DuckDBResult, format: Format): Promise<{ rows: number; head?: Uint8Array; body: Uint8Array[] }> {
  const columns: Column[] = result.columnNames().map((name, i) => ({ name, kind: kindOf(result.columnTypeId(i)), type: result.columnTypeId(i) }));
  const enc = await encoder(format, columns);
  let rows = 0;
  let bytes = 0;
  for (;;) {
    const chunk = await result.fetchChunk();
    if (chunk === null || chunk.rowCount === 0) break;
    rows += chunk.rowCount;
    if (rows > options.max_result_rows) {
      q.halt('rows');
      q.check();
    }
    const cells: Cell[][] = chunk.getColumns().map((values, i) => values.map((v) => cell(columns[i]!.kind, v)));
    bytes += enc.add(cells, chunk.rowCount);
    if (bytes > options.max_result_bytes) {
      q.halt('bytes');
      q.check();
    }
  }
  return { rows, ...enc.finish() };
}

function failureOf(q: Query, err: unknown): QueryError {
  if (err instanceof QueryFailure) return err.error;
  const message = (err as Error)?.message ?? String(err);
  switch (q.stop) {
    case 'timeout':
      return { code: 'KEEL0021', message: `the query ran longer than ${q.limit_ms} ms (admin.query_engine.query_timeout) and was cancelled` };
    case 'rows':
      return { code: 'KEEL0022', message: `the answer has more than ${options.max_result_rows} rows (admin.query_engine.max_result_rows): the query was cancelled; add a LIMIT or filter more` };
    case 'bytes':
      return { code: 'KEEL0022', message: `the answer is larger than ${options.max_result_bytes} bytes (admin.query_engine.max_result_bytes): the query was cancelled; add a LIMIT, select fewer columns or filter more` };
    case 'client':
      return CLIENT_LEFT;
    default:
      break;
  }
  if (/^Permission Error/.test(message)) return { code: 'KEEL0020', message: `${message} (queries read the introspection tables only)` };
  if (/^Out of Memory Error/.test(message)) return { code: 'KEEL0022', message: `${message} (admin.query_engine.memory_limit)` };
  return { code: 'KEEL0010', message };
}

/**
 * Per-query temp tables every connection has from the start (the one `restate invocations
 * describe` fills): empty until a query fills it, as the declaration in public it shadows.
 */
const PREMADE_TABLES: ReadonlySet<string> = new Set(['sys_journal']);

async function newConnection(): Promise<DuckDBConnection> {
  const conn = await db.connect();
  await conn.run("SET search_path = 'public'");
  for (const table of PREMADE_TABLES) await conn.run(perQueryTableSql(table));
  return conn;
}

/**
 * Connections made while the engine waits, each then used by one query and closed: never reused,
 * so nothing a query leaves on its connection reaches the next. Making one took 0.5–1 ms of the
 * query's time (measured in this process).
 */
const SPARE_CONNECTIONS = 2;
/** Each settles to a connection, or to undefined if it could not be made (the taker makes one). */
const spares: Array<Promise<DuckDBConnection | undefined>> = [];

function refillSpares(): void {
  while (spares.length < SPARE_CONNECTIONS) spares.push(newConnection().catch(() => undefined));
}

async function takeConnection(): Promise<DuckDBConnection> {
  const spare = await spares.shift();
  return spare ?? (await newConnection());
}

async function run(q: Query, m: Extract<ToEngine, { t: 'query' }>, before: Promise<void>): Promise<void> {
  q.timer = setTimeout(() => q.halt('timeout'), m.timeout_ms);
  let connecting: Promise<DuckDBConnection> | undefined;
  try {
    const { text, tables, cacheable } = await parse(q, m.sql);
    const params = m.params !== undefined && m.params.length > 0 ? m.params : undefined;
    connecting = q.conn !== undefined ? Promise.resolve(q.conn) : takeConnection().then((conn) => (q.conn = conn));
    connecting.catch(() => {}); // awaited below, or before the connection is closed
    if ([...tables.keys()].some((t) => COPY_VIEWS.has(t))) await waitLoaded(q);
    await before;
    await keepRegistryTables(q, tables, m.registry_version, connecting);
    await loadTables(q, tables, connecting);
    q.conn = await connecting;
    q.check();
    const answer = await encodeAnswer(q, await q.conn.stream(text, params), m.format);
    const chunks = rechunk(answer.body, CHUNK_BYTES);
    const first = chunks.shift() ?? new Uint8Array(0);
    q.rest = chunks;
    send({ t: 'answer', qid: q.qid, rows: answer.rows, ...(answer.head ? { head: answer.head } : {}), chunk: first, more: chunks.length > 0, ...(cacheable ? { constant: true } : {}) });
    if (chunks.length === 0) queries.delete(q.qid);
  } catch (err) {
    queries.delete(q.qid);
    send({ t: 'failed', qid: q.qid, error: failureOf(q, err) });
  } finally {
    clearTimeout(q.timer);
    // A query that failed while its connection was being made closes it once it is.
    await connecting?.catch(() => undefined);
    q.conn?.closeSync();
    q.conn = undefined;
    refillSpares();
  }
}

function more(qid: number): void {
  const q = queries.get(qid);
  if (q === undefined) return;
  const chunk = q.rest.shift();
  if (chunk === undefined) return;
  send({ t: 'chunk', qid, chunk, more: q.rest.length > 0 });
  if (q.rest.length === 0) queries.delete(qid);
}

// ------------------------------------------------------------------------------- messages

function onMessage(m: ToEngine): void {
  switch (m.t) {
    case 'init':
      start(m.options).catch((err) => {
        log('error', `query engine cannot start: ${(err as Error).message}`, {}, 'KEEL0023');
        process.exit(71);
      });
      break;
    case 'load-begin':
      chain(beginLoad);
      break;
    case 'changes':
    case 'load':
      chain(() => applyChanges(m));
      break;
    case 'load-end':
      chain(() => endLoad(m.seq));
      break;
    case 'query': {
      const q = new Query(m.qid, m.limit_ms);
      q.prefetched = m.journals;
      queries.set(m.qid, q);
      void run(q, m, applied);
      break;
    }
    case 'rows':
      queries.get(m.qid)?.rows.get(m.table)?.(m);
      break;
    case 'journals':
      queries.get(m.qid)?.journals?.(m);
      break;
    case 'more':
      more(m.qid);
      break;
    case 'cancel':
      queries.get(m.qid)?.halt('client');
      queries.delete(m.qid);
      break;
  }
}

process.on('message', (m) => onMessage(m as ToEngine));
// The server went (stopped, crashed, killed): nothing here outlives it. Not process.exit: it waits
// for the libuv threads, and one running a query (DuckDB's) would keep the process — and a core —
// busy until the query ends, which for a heavy one is never (an engine outlived its server for an
// hour here). The copy is a temporary directory the next engine removes.
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
