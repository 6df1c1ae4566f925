// The metadata log: an append-only sequence of JSON records in its own classic-level DB under
// meta.storage_path, plus a format version file written on first use.

import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import type { RuleBook } from '../common/limit-rules.js';
import { KeelError } from '../errors/index.js';
import type { DeploymentSchema, SubscriptionSchema } from './types.js';

export const META_FORMAT_VERSION = 1;
export const VERSION_FILE = 'KEEL_META_FORMAT_VERSION';
const DB_DIR = 'log';

export type MetaRecord =
  | { kind: 'deployment_added'; deployment: DeploymentSchema }
  | { kind: 'deployment_replaced'; deployment: DeploymentSchema }
  | { kind: 'deployment_updated'; deployment: DeploymentSchema }
  | { kind: 'deployment_removed'; id: string }
  | { kind: 'subscription_added'; subscription: SubscriptionSchema }
  | { kind: 'subscription_removed'; id: string }
  /** The whole rule book of flow control after a change (PUT /limits/rules, bulk-delete). */
  | { kind: 'limit_rules_replaced'; book: RuleBook }
  /** Keel's own: the most attempts a deployment may run at once (null: no limit). */
  | { kind: 'deployment_limit_set'; id: string; concurrency: number | null };

const KINDS = new Set([
  'deployment_added',
  'deployment_replaced',
  'deployment_updated',
  'deployment_removed',
  'subscription_added',
  'subscription_removed',
  'limit_rules_replaced',
  'deployment_limit_set',
]);

function wellFormed(rec: MetaRecord): boolean {
  switch (rec.kind) {
    case 'deployment_removed':
    case 'subscription_removed':
      return typeof rec.id === 'string';
    case 'subscription_added': {
      const s = rec.subscription;
      return !!s && typeof s.id === 'string' && typeof s.source === 'string' && typeof s.sink === 'string' && !!s.options && typeof s.options === 'object';
    }
    case 'deployment_limit_set':
      return typeof rec.id === 'string' && (rec.concurrency === null || (Number.isSafeInteger(rec.concurrency) && rec.concurrency >= 1));
    case 'limit_rules_replaced': {
      const b = rec.book;
      return !!b && Number.isSafeInteger(b.version) && Array.isArray(b.rules) && b.rules.every((r) => !!r && typeof r.pattern === 'string' && Number.isSafeInteger(r.version));
    }
    default:
      return !!rec.deployment && typeof rec.deployment.id === 'string' && Array.isArray(rec.deployment.services);
  }
}

/** Whether `rec` is a metadata record of a known kind with the fields its kind needs. */
export function isMetaRecord(rec: unknown): rec is MetaRecord {
  return !!rec && typeof rec === 'object' && KINDS.has((rec as MetaRecord).kind) && wellFormed(rec as MetaRecord);
}

/** Where the metadata records live: this node's own store, or a Kafka topic every node of a cluster follows. */
export interface MetadataLog {
  append(rec: MetaRecord): Promise<void>;
  close(): Promise<void>;
  /** In a cluster: records other nodes append, as they arrive, after those `open` returned. */
  follow?(apply: (rec: MetaRecord) => void): void;
  /** In a cluster: reads what other nodes appended up to now, at once (passed to `follow`'s `apply`). */
  catchUp?(): Promise<void>;
}

function key(seq: number): string {
  return `r/${seq.toString().padStart(16, '0')}`;
}

function corrupt(path: string, why: string): KeelError {
  return new KeelError(
    'META0005',
    `meta storage at ${path} is corrupted (${why}); wipe meta.storage_path and register the deployments again, in their earlier order`,
  );
}

/** Refuses a directory of another format, or one with files but no version file; writes the version file of a new one. */
function checkVersion(path: string): void {
  const versionFile = join(path, VERSION_FILE);
  if (existsSync(path)) {
    let entries: string[];
    try {
      entries = readdirSync(path);
    } catch (err) {
      throw new KeelError('KEEL0014', `cannot read meta storage directory ${path}: ${(err as Error).message}`, { cause: err });
    }
    if (!entries.includes(VERSION_FILE)) {
      if (entries.length > 0) {
        throw new KeelError(
          'META0011',
          `meta storage directory ${path} is not empty but has no format version file ${VERSION_FILE}; wipe it or set another meta.storage_path`,
        );
      }
    } else {
      const text = readFileSync(versionFile, 'utf8').trim();
      if (text !== String(META_FORMAT_VERSION)) {
        throw new KeelError(
          'META0010',
          `meta storage directory ${path} holds format version '${text}', this server reads version ${META_FORMAT_VERSION}; ` +
            `use the server version that wrote it, wipe the directory or set another meta.storage_path`,
        );
      }
    }
  }
  mkdirSync(path, { recursive: true });
  if (!existsSync(versionFile)) writeFileSync(versionFile, `${META_FORMAT_VERSION}\n`);
}

async function openDb(path: string): Promise<ClassicLevel<string, string>> {
  const db = new ClassicLevel<string, string>(join(path, DB_DIR), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  try {
    await db.open();
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause;
    if (cause?.code === 'LEVEL_LOCKED') {
      throw new KeelError(
        'RT0005',
        `meta storage at ${path} is locked by another process; stop the other Keel process or set another meta.storage_path`,
        { cause: err },
      );
    }
    if (cause?.code === 'LEVEL_CORRUPTION') throw corrupt(path, (err as Error).message);
    const why = (err as { cause?: Error }).cause?.message;
    throw new KeelError('KEEL0014', `cannot open meta storage at ${path}: ${(err as Error).message}${why ? `: ${why}` : ''}`, { cause: err });
  }
  return db;
}

/** Every record, in order: numbered from 1 without a gap, each well formed. Closes the DB when one is not. */
async function readRecords(db: ClassicLevel<string, string>, path: string): Promise<MetaRecord[]> {
  const records: MetaRecord[] = [];
  try {
    for await (const [k, v] of db.iterator({ gte: 'r/', lt: 'r0' })) {
      const seq = Number(k.slice(2));
      if (!Number.isInteger(seq) || seq !== records.length + 1) throw corrupt(path, `unexpected record key ${k}`);
      let rec: MetaRecord;
      try {
        rec = JSON.parse(v) as MetaRecord;
      } catch {
        throw corrupt(path, `record ${seq} is not valid JSON`);
      }
      if (!rec || typeof rec !== 'object' || !KINDS.has(rec.kind)) throw corrupt(path, `record ${seq} has an unknown kind`);
      if (!wellFormed(rec)) throw corrupt(path, `record ${seq} is malformed`);
      records.push(rec);
    }
  } catch (err) {
    await db.close().catch(() => {});
    if (err instanceof KeelError) throw err;
    throw corrupt(path, (err as Error).message);
  }
  return records;
}

export class MetaLog implements MetadataLog {
  private constructor(
    private readonly db: ClassicLevel<string, string>,
    readonly path: string,
    private nextSeq: number,
  ) {}

  /** Checks the version file, opens the DB and reads every record, in order. */
  static async open(path: string): Promise<{ log: MetaLog; records: MetaRecord[] }> {
    checkVersion(path);
    const db = await openDb(path);
    const records = await readRecords(db, path);
    return { log: new MetaLog(db, path, records.length + 1), records };
  }

  async append(rec: MetaRecord): Promise<void> {
    const seq = this.nextSeq;
    await this.db.batch().put(key(seq), JSON.stringify(rec)).write({ sync: true });
    this.nextSeq = seq + 1;
  }

  async close(): Promise<void> {
    await this.db.close();
  }
}
