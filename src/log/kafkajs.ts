// kafkajs, loaded on first use (~100 ms of CPU: a server without Kafka never loads it), and the
// retries Keel's Kafka clients share.
import { createRequire } from 'node:module';
import type * as Kafkajs from 'kafkajs';
import type { Producer } from 'kafkajs';
import { isKeelError, KeelError } from '../errors/index.js';

let kafkajs: typeof Kafkajs | undefined;
export const loadKafkajs = (): typeof Kafkajs => (kafkajs ??= createRequire(import.meta.url)('kafkajs') as typeof Kafkajs);

/** Retries of one Kafka request of the cluster's clients: ~15 s at most 500 ms apart (a broker failing over answers NOT_LEADER until it has moved). */
export const KAFKA_RETRY = { initialRetryTime: 100, maxRetryTime: 500, retries: 30 };

/** Admin reads tried on a retriable error (a moved leader, a topic a broker does not know yet), and the first wait between them. */
const ADMIN_READ_TRIES = 8;
const ADMIN_READ_RETRY_MS = 100;

/** Whether kafkajs marks `err` itself retriable (its "retries run out" is not, whatever caused it). */
const isRetriable = (err: unknown): boolean => (err as { retriable?: unknown } | undefined)?.retriable === true;

/**
 * `work` again after an error kafkajs marks retriable, `tries` times at most, waiting `step_ms`
 * longer each time, up to `max_ms` where given (running `between` first, when given).
 */
async function retrying<T>(work: () => Promise<T>, o: { tries: number; step_ms: number; max_ms?: number; between?: () => Promise<unknown> }): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (err) {
      if (!isRetriable(err) || attempt >= o.tries) throw err;
      await o.between?.().catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, Math.min(o.step_ms * attempt, o.max_ms ?? Infinity)));
    }
  }
}

/** `read` again after a retriable error, up to ADMIN_READ_TRIES, waiting longer each time (and `refresh`ing first, when given). */
export function retryingRead<T>(read: () => Promise<T>, refresh?: () => Promise<unknown>): Promise<T> {
  return retrying(read, { tries: ADMIN_READ_TRIES, step_ms: ADMIN_READ_RETRY_MS, ...(refresh !== undefined ? { between: refresh } : {}) });
}

/** Causes looked through for a transient one: kafkajs wraps the last error when its retries run out. */
const CAUSE_DEPTH = 8;

/**
 * Whether `err` is, or was caused by, an error kafkajs marks retriable (a refused connection, a
 * leader or coordinator moving): the same request may succeed a moment later. A fence, a broken
 * transaction or an error of Keel's own is not.
 */
export function isTransientKafkaError(err: unknown): boolean {
  let e = err;
  for (let depth = 0; depth < CAUSE_DEPTH && typeof e === 'object' && e !== null; depth++) {
    if (isRetriable(e)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * The innermost message among `err`'s causes ("Connection error: connect ECONNREFUSED 127.0.0.1:9092"):
 * what kafkajs throws when its retries run out names only that.
 */
export function rootCauseMessage(err: unknown): string {
  let message = String((err as Error | undefined)?.message ?? err);
  let e = err;
  for (let depth = 0; depth < CAUSE_DEPTH && typeof e === 'object' && e !== null; depth++) {
    const m = (e as Error).message;
    if (typeof m === 'string' && m !== '') message = m;
    e = (e as { cause?: unknown }).cause;
  }
  return message;
}

/**
 * `work`, a step of a cluster node's start that needs the brokers; a failure of kafkajs's (after
 * kafkajs's own retries, ~15 s) becomes KEEL0801 naming the step, the brokers and the cause, which
 * the server's start logs as its fatal line (it crashed with kafkajs's bare stack trace before).
 */
export async function atBrokers<T>(what: string, brokers: readonly string[], work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    // Only Kafka's: an error of Keel's or a local one (a file, the store) is passed on as it is.
    if (isKeelError(err) || !String((err as Error | undefined)?.name).startsWith('KafkaJS')) throw err;
    throw new KeelError('KEEL0801', `cannot ${what} on the Kafka brokers ${brokers.join(', ')} (cluster.brokers): ${rootCauseMessage(err)}`, { cause: err });
  }
}

/** A producer's connect refused this often is given up, tries 100 ms more apart each time up to 500 ms (~14 s: Kafka's broker session is 9 s by default). */
const PRODUCER_CONNECT_TRIES = 30;
const PRODUCER_CONNECT_RETRY_MS = 100;

/**
 * A producer of `create`'s, connected. An idempotent producer's connect asks one broker for its
 * producer id, and kafkajs gives up at once when that broker refuses the connection (it retries
 * Kafka's error answers only): a broker killed and not yet fenced, or one restarting, made a node
 * taking the lead exit. Such an error is tried again with a fresh producer (its metadata read
 * anew); none once `closed()`. Only an error retriable itself: kafkajs's "retries run out" came after
 * ~15 s of its own (KAFKA_RETRY), and 30 of those would hold a takeover for minutes.
 */
export function connectProducer(create: () => Producer, closed: () => boolean): Promise<Producer> {
  const once = async (): Promise<Producer> => {
    if (closed()) throw new Error('the Kafka client is closed');
    const producer = create();
    try {
      await producer.connect();
      return producer;
    } catch (err) {
      await producer.disconnect().catch(() => undefined);
      throw err;
    }
  };
  return retrying(once, { tries: PRODUCER_CONNECT_TRIES, step_ms: PRODUCER_CONNECT_RETRY_MS, max_ms: KAFKA_RETRY.maxRetryTime });
}
