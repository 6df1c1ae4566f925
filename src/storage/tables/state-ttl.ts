// Tables of state TTLs (Keel's own: PATCH /services/{name} "state_ttl"). `sttl`: when each object
// of a service with a TTL last had its state written (or was last accessed, as the service's TTL
// counts); `sttl-by-time`: the same, keyed by service and that time, so the cleaner reads only the
// objects whose TTL may be over, oldest first. `state-ttls`: the book of TTLs the partition folds
// with, as the last StateTtls command of its log gave it.
import { keysIn, type Db } from '../store.js';
import { pad, statePrefix, tablePrefix } from '../keys.js';

export interface StateTtl {
  service: string;
  ttl_ms: number;
  on_access: boolean;
  /** When (the log's time) the service got a TTL: state untouched since counts from then. */
  since_ms: number;
}

const TOUCHED = 'sttl';
const BY_TIME = 'sttl-by-time';

const serviceSegment = (service: string): string => `${encodeURIComponent(service)}/`;

export const stateTtlTable = {
  touchedKey: (partition: number, objectKey: string): string => `${tablePrefix(partition, TOUCHED)}${objectKey}`,
  encodeTouched: (at_ms: number): Buffer => Buffer.from(String(at_ms)),
  decodeTouched: (raw: Buffer): number => Number(raw.toString('utf8')),

  byTimeKey: (partition: number, service: string, at_ms: number, objectKey: string): string =>
    `${tablePrefix(partition, BY_TIME)}${serviceSegment(service)}${pad(Math.max(0, at_ms))}/${objectKey}`,

  /** Objects of `service` last touched before `before_ms`, oldest first (the caller stops reading when it has enough). */
  async *touchedBefore(db: Db, partition: number, service: string, before_ms: number): AsyncGenerator<{ objectKey: string; at_ms: number }> {
    const prefix = `${tablePrefix(partition, BY_TIME)}${serviceSegment(service)}`;
    for await (const key of keysIn(db, { gte: prefix, lt: `${prefix}${pad(Math.max(0, before_ms))}` })) {
      const rest = key.slice(prefix.length);
      const cut = rest.indexOf('/');
      yield { at_ms: Number(rest.slice(0, cut)), objectKey: rest.slice(cut + 1) };
    }
  },

  bookKey: (partition: number): string => `${statePrefix(partition)}state-ttls`,
  encodeBook: (book: readonly StateTtl[]): Buffer => Buffer.from(JSON.stringify(book)),
  decodeBook: (raw: Buffer): StateTtl[] => JSON.parse(raw.toString('utf8')) as StateTtl[],

  async readBook(db: Db, partition: number): Promise<StateTtl[]> {
    const raw = await db.get(stateTtlTable.bookKey(partition));
    return raw === undefined ? [] : stateTtlTable.decodeBook(raw);
  },
};
