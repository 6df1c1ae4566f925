// Table `subpos`: per (subscription, topic, Kafka partition), where Keel's consumption stands —
// the offset of the next record to deliver — with counters. It changes in the same batch as the
// invocations the records made, so after a crash consumption resumes exactly there.
import { valuesIn, type Db } from '../store.js';
import { pad, tablePrefix, tableRange } from '../keys.js';

export interface SubscriptionPosition {
  subscription_id: string;
  topic: string;
  kafka_partition: number;
  /** Offset of the next record to deliver: every record below it has its invocation. */
  next_offset: number;
  /** Records that became invocations. */
  delivered: number;
  /** Records that could not become invocations (a keyed sink and a key that is not UTF-8). */
  skipped: number;
  /** When the position last moved (the command's time). */
  updated_at_ms: number;
}

const TABLE = 'subpos';

/** In-memory name of a position: subscription ids and topic names hold no NUL. */
export function positionName(subscription_id: string, topic: string, kafka_partition: number): string {
  return `${subscription_id}\0${topic}\0${kafka_partition}`;
}

export const subscriptionPositionsTable = {
  key: (partition: number, p: Pick<SubscriptionPosition, 'subscription_id' | 'topic' | 'kafka_partition'>): string =>
    `${tablePrefix(partition, TABLE)}${p.subscription_id}/${encodeURIComponent(p.topic)}/${pad(p.kafka_partition, 10)}`,
  encode: (p: SubscriptionPosition): Buffer => Buffer.from(JSON.stringify(p)),
  decode: (raw: Buffer): SubscriptionPosition => JSON.parse(raw.toString('utf8')) as SubscriptionPosition,
  /** What every key of this table in `partition` starts with. */
  prefix: (partition: number): string => tablePrefix(partition, TABLE),

  async *scan(db: Db, partition: number): AsyncGenerator<SubscriptionPosition> {
    for await (const value of valuesIn(db, tableRange(partition, TABLE))) yield subscriptionPositionsTable.decode(value);
  },
};
