import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import type { Config } from '../config/index.js';
import { KeelError } from '../errors/index.js';

export type Db = ClassicLevel<string, Buffer>;

/**
 * 2: the `live` index of invocations that have not completed. 3: the `statekeys` index. 4: the
 * `restart` index and counts. 5: the tables of invocations keyed uuid first (keys.ts's `idKeyText`).
 * 6: outbox entries in a binary encoding (format 5's JSON ones are still read).
 */
export const WORKER_FORMAT_VERSION = 6;

export interface OpenOptions {
  /** LevelDB's block cache (classic-level's default: 8 MiB). */
  block_cache_bytes?: number;
  /**
   * Table files kept open (classic-level's default: 1,000). Each open table holds its index and
   * bloom filter in native memory: a scan of a store of a million invocations (~900 tables)
   * kept ~50 MB more resident with the default than with 200.
   */
  max_open_files?: number;
  /**
   * LevelDB's write buffer (classic-level's default: 4 MiB). With 32 MiB, 600,000 calls among
   * 500,000 retained objects and sleepers compacted 786 MB instead of 1,844 MB (−20% CPU per call
   * in the store): overwrites and deletes of an invocation's rows meet in memory before they reach
   * a table. A crash restart replays up to this much of LevelDB's log (~10 ms per MiB).
   */
  write_buffer_bytes?: number;
  /** Other threads of this process open the same store (classic-level shares one handle): worker.threads > 1. */
  multithreading?: boolean;
  /** Brings a store of an older format version to this one (storage/upgrade.ts); without it, such a store is refused. */
  upgrade?: (db: Db, from: number) => Promise<void>;
}
const VERSION_FILE = 'KEEL_STORAGE_VERSION';

/** The worker store's options as configured (every thread that opens it opens it so). */
export function workerStoreOptions(config: Config): OpenOptions {
  const sdb = config.worker.storage_db;
  return { block_cache_bytes: sdb.block_cache_size_bytes, max_open_files: sdb.max_open_files, write_buffer_bytes: sdb.write_buffer_size_bytes, multithreading: config.worker.threads > 1 };
}

/**
 * Opens the worker store at `path`: one LevelDB for every partition (keys are prefixed with
 * the partition). A fresh directory gets a format version file; a non-empty one without it is
 * refused (RT0009), and so is a directory another process has open (RT0005).
 */
export async function openWorkerStore(path: string, options: OpenOptions = {}): Promise<Db> {
  mkdirSync(path, { recursive: true });
  const versionFile = join(path, VERSION_FILE);
  let from: number | undefined;
  if (!existsSync(versionFile)) {
    if (readdirSync(path).length > 0) {
      throw new KeelError('RT0009', `worker storage ${path} is not empty but has no ${VERSION_FILE} file: wipe it or set another worker.storage_db.path`);
    }
    writeFileSync(versionFile, `${WORKER_FORMAT_VERSION}\n`);
  } else {
    const version = readFileSync(versionFile, 'utf8').trim();
    if (version !== String(WORKER_FORMAT_VERSION)) {
      const upgradable = options.upgrade !== undefined && /^[0-9]+$/.test(version) && Number(version) >= 2 && Number(version) < WORKER_FORMAT_VERSION;
      if (!upgradable) {
        throw new KeelError('RT0009', `worker storage ${path} has format version '${version}', this server reads version ${WORKER_FORMAT_VERSION}: use the server version that wrote it, wipe it or set another worker.storage_db.path`);
      }
      from = Number(version);
    }
  }
  const db = await openLevel(path, options);
  if (from !== undefined) {
    try {
      await options.upgrade!(db, from);
    } catch (err) {
      await db.close().catch(() => {});
      throw err;
    }
    writeFileSync(versionFile, `${WORKER_FORMAT_VERSION}\n`);
  }
  return db;
}

async function openLevel(path: string, options: OpenOptions): Promise<Db> {
  const db: Db = new ClassicLevel<string, Buffer>(join(path, 'db'), {
    keyEncoding: 'utf8',
    valueEncoding: 'buffer',
    ...(options.block_cache_bytes !== undefined ? { cacheSize: options.block_cache_bytes } : {}),
    ...(options.max_open_files !== undefined ? { maxOpenFiles: options.max_open_files } : {}),
    ...(options.write_buffer_bytes !== undefined ? { writeBufferSize: options.write_buffer_bytes } : {}),
    ...(options.multithreading ? { multithreading: true } : {}),
  });
  try {
    await db.open();
  } catch (err) {
    const e = err as { code?: string; cause?: { code?: string } } | undefined;
    if (e?.cause?.code === 'LEVEL_LOCKED' || e?.code === 'LEVEL_LOCKED') {
      throw new KeelError('RT0005', `worker storage ${path} is locked by another process: stop it, or set another worker.storage_db.path`, { cause: err });
    }
    // classic-level says 'Database failed to open'; the reason is in its cause.
    const cause = (err as { cause?: Error }).cause?.message;
    const why = cause ? `${(err as Error).message}: ${cause}` : (err as Error).message;
    const corrupt = /corrupt|checksum/i.test(why);
    throw new KeelError(corrupt ? 'KEEL0015' : 'KEEL0014', `cannot open worker storage ${path}: ${why}${corrupt ? '' : ' (check the path, its permissions and free space)'}`, { cause: err });
  }
  return db;
}

/** One write of a batch: a put, or a delete when the value is null. */
export type StateWrite = [key: string, value: Buffer | null];

/** Rows fetched per call into the store when scanning a range. */
const SCAN_CHUNK_ROWS = 1024;

type Range = { gte?: string; gt?: string; lte?: string; lt?: string; limit?: number };

/**
 * The rows of a range, fetched `SCAN_CHUNK_ROWS` at a time (`nextv`): `for await` over a
 * classic-level iterator goes through `next()` per row, 2-4× slower on the ranges recovery
 * reads at startup (~12 µs a row measured, against ~3-4 µs in chunks).
 */
async function* inChunks<T>(it: { nextv(size: number): Promise<T[]>; close(): Promise<void> }): AsyncGenerator<T> {
  try {
    for (;;) {
      const chunk = await it.nextv(SCAN_CHUNK_ROWS);
      if (chunk.length === 0) return;
      yield* chunk;
    }
  } finally {
    await it.close();
  }
}

// A scan reads each block once: it does not fill the block cache (worker.storage_db.block_cache_size),
// which would evict what the fold reads again and again (object state, statuses) for nothing.
export const entriesIn = (db: Db, range: Range): AsyncGenerator<[key: string, value: Buffer]> => inChunks(db.iterator({ ...range, fillCache: false }));
export const keysIn = (db: Db, range: Range): AsyncGenerator<string> => inChunks(db.keys({ ...range, fillCache: false }));
export const valuesIn = (db: Db, range: Range): AsyncGenerator<Buffer> => inChunks(db.values({ ...range, fillCache: false }));
