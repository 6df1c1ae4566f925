// Snapshots of a partition's store, shared by the nodes of a cluster: a node that never had a
// partition, or whose copy is older than the start of the partition's (trimmed) log, loads the
// newest snapshot and reads the log on from the offset it covers.
//
// A snapshot is every key of the partition (`p<partition>/`: state, applied position, log
// cursor) read through one LevelDB iterator, which sees the store as it was when it was created:
// the state and the cursor come from the same atomic batch, so the snapshot covers exactly the
// log up to the cursor. The file is gzip of frames [u32 key bytes][key][u32 value bytes][value];
// gzip's trailer checks the whole. It is written under a temporary name, fsynced and renamed,
// so a reader sees complete snapshots only; the name carries where it ends in the log.
import { createReadStream, createWriteStream, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { createGunzip, createGzip } from 'node:zlib';
import { assert } from '../common/assert.js';
import { pad, partitionPrefix } from './keys.js';
import { entriesIn, WORKER_FORMAT_VERSION, type Db } from './store.js';
import { logTable, type LogCursor } from './tables/log.js';
import { format5Key } from './upgrade.js';

/** A stored snapshot: which partition, and the log cursor it covers (the next offset to read, the epoch state there). */
export interface SnapshotInfo {
  partition: number;
  cursor: LogCursor;
  bytes: number;
  /** The worker format its keys are in (storage/store.ts's WORKER_FORMAT_VERSION when it was written). */
  format: number;
  /** The store's name for it. */
  name: string;
}

/** Where a cluster's snapshots live: a shared directory here; an object store could fill it later. */
export interface SnapshotStore {
  /** The partition's snapshots, oldest first (by the log offset they cover). */
  list(partition: number): Promise<SnapshotInfo[]>;
  /** Stores the partition's keys; `cursor`, asked once they are read, says where they end in the log. */
  write(partition: number, entries: AsyncIterable<[string, Buffer]>, cursor: () => LogCursor): Promise<SnapshotInfo>;
  read(snapshot: SnapshotInfo): AsyncIterable<[string, Buffer]>;
  delete(snapshot: SnapshotInfo): Promise<void>;
  /** Removes what writes that never finished left behind (a node killed mid-write) once older than `age_ms`; returns how many. */
  removeUnfinished(partition: number, age_ms: number): Promise<number>;
}

/** Keys written per batch while a snapshot loads. */
const RESTORE_BATCH_KEYS = 1_000;
// The format is in the name since format 5, so that a node of format 4 (whose pattern has no `-f`)
// never takes a snapshot whose keys it cannot read; a name without it is of format 4.
const NAME = /^o(\d{20})-e(\d{10})-p(\d{16})(?:-f(\d+))?\.keel-snapshot$/;
const FORMAT_WITHOUT_SUFFIX = 4;
/** A snapshot being written (its name is known only once it is). */
const TEMPORARY_PREFIX = '.writing-';

export class DirectorySnapshotStore implements SnapshotStore {
  constructor(readonly root: string) {}

  private dir(partition: number): string {
    return join(this.root, `p${partition}`);
  }

  async list(partition: number): Promise<SnapshotInfo[]> {
    const names = await fsp.readdir(this.dir(partition)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [] as string[];
      throw err;
    });
    const out: SnapshotInfo[] = [];
    for (const name of names.sort()) {
      const m = NAME.exec(name);
      if (m === null) continue; // temporary files of writes in progress, or someone else's
      const format = m[4] === undefined ? FORMAT_WITHOUT_SUFFIX : Number(m[4]);
      if (format > WORKER_FORMAT_VERSION) continue; // a newer Keel's: keys this one cannot read
      const { size } = await fsp.stat(join(this.dir(partition), name));
      out.push({ partition, cursor: { offset: Number(m[1]), epoch: Number(m[2]), position: Number(m[3]) }, bytes: size, format, name });
    }
    return out;
  }

  async write(partition: number, entries: AsyncIterable<[string, Buffer]>, cursorOf: () => LogCursor): Promise<SnapshotInfo> {
    const dir = this.dir(partition);
    await fsp.mkdir(dir, { recursive: true });
    const temporary = join(dir, `${TEMPORARY_PREFIX}${process.pid}-${Date.now()}.tmp`);
    let name: string;
    let cursor: LogCursor;
    try {
      await pipeline(Readable.from(frames(entries)), createGzip(), createWriteStream(temporary));
      cursor = cursorOf();
      name = `o${pad(cursor.offset, 20)}-e${pad(cursor.epoch, 10)}-p${pad(cursor.position)}-f${WORKER_FORMAT_VERSION}.keel-snapshot`;
      const file = await fsp.open(temporary, 'r+');
      await file.sync().finally(() => file.close());
      await fsp.rename(temporary, join(dir, name));
    } catch (err) {
      await fsp.rm(temporary, { force: true });
      throw err;
    }
    const directory = await fsp.open(dir, 'r');
    await directory.sync().finally(() => directory.close());
    const { size } = await fsp.stat(join(dir, name));
    return { partition, cursor, bytes: size, format: WORKER_FORMAT_VERSION, name };
  }

  async *read(snapshot: SnapshotInfo): AsyncIterable<[string, Buffer]> {
    yield* unframe(createReadStream(join(this.dir(snapshot.partition), snapshot.name)).pipe(createGunzip()));
  }

  async delete(snapshot: SnapshotInfo): Promise<void> {
    await fsp.rm(join(this.dir(snapshot.partition), snapshot.name), { force: true });
  }

  async removeUnfinished(partition: number, age_ms: number): Promise<number> {
    const dir = this.dir(partition);
    const names = await fsp.readdir(dir).catch(() => [] as string[]);
    let removed = 0;
    for (const name of names) {
      if (!name.startsWith(TEMPORARY_PREFIX)) continue;
      const stat = await fsp.stat(join(dir, name)).catch(() => undefined);
      if (stat === undefined || Date.now() - stat.mtimeMs < age_ms) continue;
      await fsp.rm(join(dir, name), { force: true });
      removed += 1;
    }
    return removed;
  }
}

/** Frames gathered into one write to the gzip stream. */
const WRITE_CHUNK_BYTES = 64 * 1024;

async function* frames(entries: AsyncIterable<[string, Buffer]>): AsyncGenerator<Buffer> {
  let parts: Buffer[] = [];
  let bytes = 0;
  for await (const [key, value] of entries) {
    const k = Buffer.from(key, 'utf8');
    const head = Buffer.allocUnsafe(4);
    head.writeUInt32BE(k.length);
    const size = Buffer.allocUnsafe(4);
    size.writeUInt32BE(value.length);
    parts.push(head, k, size, value);
    bytes += 8 + k.length + value.length;
    if (bytes >= WRITE_CHUNK_BYTES) {
      yield Buffer.concat(parts);
      parts = [];
      bytes = 0;
    }
  }
  if (bytes > 0) yield Buffer.concat(parts);
}

/** The records of a frame stream. Chunks are joined only once a whole frame is there (values can be megabytes). */
async function* unframe(stream: AsyncIterable<Buffer>): AsyncGenerator<[string, Buffer]> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let needed = 4;
  for await (const chunk of stream) {
    pending.push(chunk);
    pendingBytes += chunk.length;
    if (pendingBytes < needed) continue;
    const buffered = pending.length === 1 ? pending[0]! : Buffer.concat(pending);
    let at = 0;
    for (;;) {
      const left = buffered.length - at;
      if (left < 4) {
        needed = 4;
        break;
      }
      const keyBytes = buffered.readUInt32BE(at);
      if (left < 8 + keyBytes) {
        needed = 8 + keyBytes;
        break;
      }
      const end = at + 8 + keyBytes + buffered.readUInt32BE(at + 4 + keyBytes);
      if (buffered.length < end) {
        needed = end - at;
        break;
      }
      yield [buffered.toString('utf8', at + 4, at + 4 + keyBytes), Buffer.from(buffered.subarray(at + 8 + keyBytes, end))];
      at = end;
    }
    pending = at === buffered.length ? [] : [buffered.subarray(at)];
    pendingBytes = buffered.length - at;
  }
  if (pendingBytes > 0) throw new Error(`snapshot ends inside a record (${pendingBytes} bytes left)`);
}

/**
 * Writes a snapshot of the partition as it stands now. One iterator reads every key of it (a
 * LevelDB iterator reads the store as it was when it was created), the log cursor among them, so
 * the state and the cursor agree. Undefined when the partition has applied nothing yet.
 */
export async function snapshotPartition(db: Db, partition: number, store: SnapshotStore): Promise<SnapshotInfo | undefined> {
  if ((await logTable.readCursor(db, partition)) === undefined) return undefined;
  const prefix = partitionPrefix(partition);
  const cursorKey = logTable.cursorKey(partition);
  let cursor: LogCursor | undefined;
  async function* entries(): AsyncGenerator<[string, Buffer]> {
    for await (const [key, value] of entriesIn(db, { gte: prefix, lt: `${prefix}~` })) {
      if (key === cursorKey) cursor = logTable.decodeCursor(partition, value);
      yield [key, value];
    }
  }
  return store.write(partition, entries(), () => {
    assert(cursor !== undefined, () => `partition ${partition}: its snapshot holds no log cursor`);
    return cursor;
  });
}

/**
 * Replaces every key of the partition with the snapshot's (nothing else may use the partition
 * meanwhile). The applied position and the log cursor are written last, with the final batch:
 * a restore that fails half-way leaves a partition without a cursor, which the next open
 * restores again, never one that looks caught up. A snapshot of a format 4 store (a node not yet
 * upgraded wrote it) loads with its keys as format 5 has them.
 */
export async function restorePartition(db: Db, snapshot: SnapshotInfo, store: SnapshotStore): Promise<{ keys: number }> {
  const prefix = partitionPrefix(snapshot.partition);
  const last = new Set([logTable.cursorKey(snapshot.partition), logTable.appliedKey(snapshot.partition)]);
  const held: Array<[string, Buffer]> = [];
  await db.clear({ gte: prefix, lt: `${prefix}~` });
  let batch = db.batch();
  let keys = 0;
  for await (const [key, value] of store.read(snapshot)) {
    assert(key.startsWith(prefix), () => `snapshot ${snapshot.name} of partition ${snapshot.partition} holds the key ${key}`);
    if (last.has(key)) held.push([key, value]);
    else batch.put(snapshot.format < 5 ? format5Key(key) : key, value);
    if (++keys % RESTORE_BATCH_KEYS === 0 && batch.length > 0) {
      await batch.write();
      batch = db.batch();
    }
  }
  for (const [key, value] of held) batch.put(key, value);
  await batch.write({ sync: true });
  const cursor = await logTable.readCursor(db, snapshot.partition);
  assert(cursor !== undefined && cursor.offset === snapshot.cursor.offset && cursor.position === snapshot.cursor.position, () => `snapshot ${snapshot.name} restored the cursor ${JSON.stringify(cursor)}`);
  return { keys };
}
