// Table `promise`: durable promises of workflows, by `objectKey/name` (JSON).
import { entriesIn, type Db } from '../store.js';
import { objectKeyOf, splitObjectKey, tablePrefix, tableRange } from '../keys.js';

export interface PromiseState {
  value?: string;
  failure?: { code: number; message: string };
  /** Invocations waiting for a `get`: id, completion id and notification type. */
  waiters: Array<{ id: string; completion_id: number; entry_type: number }>;
}

const TABLE = 'promise';

export function promiseKeyOf(service: string, key: string, name: string, scope?: string): string {
  return `${objectKeyOf(service, key, scope)}/${encodeURIComponent(name)}`;
}

export function splitPromiseKey(promiseKey: string): { service: string; key: string; name: string; scope?: string } {
  const cut = promiseKey.lastIndexOf('/');
  return { ...splitObjectKey(promiseKey.slice(0, cut)), name: decodeURIComponent(promiseKey.slice(cut + 1)) };
}

export const promisesTable = {
  key: (partition: number, promiseKey: string): string => `${tablePrefix(partition, TABLE)}${promiseKey}`,
  encode: (p: PromiseState): Buffer => Buffer.from(JSON.stringify(p)),
  decode: (raw: Buffer): PromiseState => JSON.parse(raw.toString('utf8')) as PromiseState,

  async *scan(db: Db, partition: number): AsyncGenerator<[promiseKey: string, promise: PromiseState]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      yield [key.slice(prefix.length), promisesTable.decode(value)];
    }
  },
};
