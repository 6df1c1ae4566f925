// What the main thread and a partition thread (worker.threads > 1, issue 23) say to each other
// besides the frames (partition/frames.ts: invokes, their outcomes, status changes for the query
// engine): calls with one answer, streams of rows pulled a chunk at a time, the schema registry's
// records, the partitions' failures. Everything here is a structured clone: errors and Buffers lose their class
// on the way and are made again on the other side (`errorOf`, `revive`).
import { KeelError, type ErrorCode } from '../errors/index.js';
import type { MetaRecord } from '../metadata/store.js';
import { NotLedHereError, PartitionMovedError } from '../partition/errors.js';
import type { PartitionFailure } from '../partition/processor.js';
import type { SubscriptionChanges } from '../partition/worker.js';

/** Requests with one answer: the gateway's rare ones, the keyed and fanned-out admin reads, rule books, metrics. */
export const CALLS = [
  'attach', 'output', 'append', 'appendTo',
  'journalEntries', 'stepAttempts', 'manage', 'pauseFlowQueue', 'schedule', 'applySchedule', 'setState',
  'unfinishedPinnedTo', 'replayCandidates', 'partitions',
  'setLimitRules', 'setStateTtls', 'metrics', 'settle',
] as const;
export type CallName = (typeof CALLS)[number];

/** The admin reads that list rows: each thread's rows come in chunks, one asked for at a time. */
export const STREAMS = ['invocationLines', 'state', 'inbox', 'flowQueues', 'flowEntries', 'flowScheduler', 'userLimits', 'locks', 'promises', 'schedules'] as const;
export type StreamName = (typeof STREAMS)[number];

/** A chunk ends at this many rows or about this many bytes, whichever comes first. */
export const CHUNK_ROWS = 512;
export const CHUNK_BYTES = 1 << 20;

export type ToThread =
  | { t: 'call'; q: number; m: CallName; args: unknown[] }
  | { t: 'open'; q: number; m: StreamName; args: unknown[] }
  | { t: 'next'; q: number }
  | { t: 'close'; q: number }
  | { t: 'record'; rec: MetaRecord }
  /** Status changes on (tagged `gen`: frames of an earlier watch are dropped) or off. */
  | { t: 'watch'; on: boolean; gen: number }
  /** Start the partitions' work: attempts, timers, cleaning (once the server listens). */
  | { t: 'go' }
  | { t: 'stop' };

export type FromThread =
  | { t: 'ready'; opened: number[] }
  | { t: 'failed'; error: ErrorShape }
  | { t: 'answer'; q: number; value?: unknown; error?: ErrorShape }
  | { t: 'chunk'; q: number; rows: unknown[]; done: boolean; error?: ErrorShape }
  | { t: 'failures'; failures: PartitionFailure[] }
  /** What a partition holds of Kafka subscriptions, at the thread's start and as batches change it. */
  | { t: 'subscriptions'; changes: SubscriptionChanges }
  | { t: 'stopped' };

/** A refusal as it crosses between threads. */
export interface ErrorShape {
  name: 'NotLedHereError' | 'PartitionMovedError' | 'KeelError' | 'Error';
  message: string;
  code?: string;
  status?: number;
  partition?: number;
  invocation?: string;
}

export function errorShape(err: unknown): ErrorShape {
  const e = err as (Error & { code?: unknown; status?: unknown }) | undefined;
  const name = err instanceof NotLedHereError ? 'NotLedHereError' : err instanceof PartitionMovedError ? 'PartitionMovedError' : err instanceof KeelError ? 'KeelError' : 'Error';
  return {
    name,
    message: e?.message ?? String(err),
    ...(typeof e?.code === 'string' ? { code: e.code } : {}),
    ...(typeof e?.status === 'number' ? { status: e.status } : {}),
    ...(err instanceof NotLedHereError || err instanceof PartitionMovedError ? { partition: err.partition } : {}),
    ...(err instanceof PartitionMovedError ? { invocation: err.invocation } : {}),
  };
}

/** The error `errorShape` described, of its class again: the edge's error handlers and routing see what a local call throws. */
export function errorOf(e: ErrorShape): Error {
  if (e.name === 'NotLedHereError') return new NotLedHereError(e.partition!);
  if (e.name === 'PartitionMovedError') return new PartitionMovedError(e.partition!, e.invocation!);
  if (e.name === 'KeelError' && e.code !== undefined) return new KeelError(e.code as ErrorCode, e.message, { relayed: e.status });
  return new Error(e.message);
}

/**
 * A cloned value with its Buffers made Buffers again (a clone makes them plain Uint8Arrays, whose
 * toString ignores an encoding), through arrays, plain objects and Maps, in place.
 */
export function revive<T>(v: T): T {
  return reviveAny(v, 0) as T;
}

/** Deeper than any row, status or command here: a cycle or a runaway nesting stops. */
const MAX_DEPTH = 16;

function reviveAny(v: unknown, depth: number): unknown {
  if (v instanceof Uint8Array) return Buffer.isBuffer(v) ? v : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (v === null || typeof v !== 'object' || depth >= MAX_DEPTH) return v;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = reviveAny(v[i], depth + 1);
  } else if (v instanceof Map) {
    for (const [k, x] of v) v.set(k, reviveAny(x, depth + 1));
  } else if (Object.getPrototypeOf(v) === Object.prototype) {
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) o[k] = reviveAny(o[k], depth + 1);
  }
  return v;
}

/** The approximate bytes a row adds to a chunk: its bytes, or its fields' (state values, promise results). */
export function rowBytes(row: unknown): number {
  if (row instanceof Uint8Array) return row.byteLength;
  let bytes = 256;
  if (row !== null && typeof row === 'object') for (const v of Object.values(row)) if (v instanceof Uint8Array) bytes += v.byteLength;
  return bytes;
}
