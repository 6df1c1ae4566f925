import type { StateWrite } from '../log/partition-log.js';
import { pad } from '../storage/store.js';

export type Status = 'scheduled' | 'inboxed' | 'running' | 'backing-off' | 'suspended' | 'paused' | 'completed';

export interface LastFailure {
  error_code: string;
  failure_code: number;
  message: string;
  related_entry_index?: number;
  related_entry_name?: string;
  related_entry_type?: number;
}

export interface InvocationResult {
  /** base64 of the output value */
  value?: string;
  failure?: { code: number; message: string; metadata?: Array<{ key: string; value: string }> };
}

/** The materialised status of one invocation; JSON in the store under `s/inv/<id>`. */
export interface InvocationStatus {
  id: string;
  service: string;
  handler: string;
  key: string;
  service_type: string;
  /** 'Exclusive' | 'Shared' | 'Workflow' | '' */
  handler_type: string;
  status: Status;
  /** Attempt number; entries from any other attempt are dropped. */
  epoch: number;
  journal_length: number;
  created_at_ms: number;
  modified_at_ms: number;
  idempotency_key?: string;
  /** The invocation waiting for this one's result (call), with the completion id to use. */
  caller_id?: string;
  caller_completion_id?: number;
  /** `Svc/handler` and id of the invocation that called or sent this one. */
  caller_target?: string;
  invoked_by_id?: string;
  restarted_from?: string;
  /** Invocations this one called and waits for: killed with it. */
  children?: string[];
  /** Other invocations attached to this one's result. */
  attachers?: Array<{ id: string; completion_id: number; entry_type: number }>;
  scheduled_at_ms?: number;
  execute_at_ms?: number;
  inboxed_at_ms?: number;
  completion_retention_ms: number;
  journal_retention_ms: number;
  deployment_id?: string;
  protocol_version?: number;
  sdk_version?: string;
  retry_count: number;
  last_start_at_ms?: number;
  next_retry_at_ms?: number;
  last_failure?: LastFailure;
  waiting?: { completions: number[]; signals: number[]; named_signals: string[] };
  /** The Output command's result, recorded before End arrives. */
  output?: InvocationResult;
  completed_at_ms?: number;
  result?: InvocationResult;
}

export interface JournalEntry {
  type: number;
  payload: Buffer;
}

export interface Timer {
  id: string;
  completion_id: number;
  wake_up_ms: number;
  /** TimerKind: 0 sleep completion, 1 start of a scheduled invocation */
  kind: number;
}

export interface PromiseState {
  value?: string;
  failure?: { code: number; message: string };
  /** Invocations waiting for a `get`: id, completion id and notification type. */
  waiters: Array<{ id: string; completion_id: number; entry_type: number }>;
}

export interface OutboxEntry {
  seq: number;
  /** Invocation id (text) whose partition receives the command. */
  target: string;
  /** The encoded Command to append there. */
  command: Buffer;
}

/** What a fold asks for once its batch is durable. */
export type Action =
  | { kind: 'start'; id: string; epoch: number }
  | { kind: 'forward'; id: string; epoch: number; type: number; payload: Uint8Array }
  | { kind: 'timer'; timer: Timer }
  | { kind: 'retry'; id: string; epoch: number; at_ms: number }
  | { kind: 'completed'; id: string }
  | { kind: 'outbox'; entry: OutboxEntry }
  | { kind: 'abort'; id: string }
  /** The current attempt broke a rule (RT0017...): end it and record the failure under `epoch`. */
  | { kind: 'reject'; id: string; epoch: number; error_code: string; message: string; entry_index: number; entry_type: number };

/**
 * The state of one partition, in memory, written through to the store. Folds change it only
 * through these methods, which record every store write of the current batch.
 */
/** Completed invocations kept in memory; older ones are read back from the store when needed. */
export const COMPLETED_IN_MEMORY = 10_000;

export class PartitionState {
  /** Every invocation that has not completed, and the most recently used completed ones. */
  readonly invocations = new Map<string, InvocationStatus>();
  /** Completed ids in memory, least recently used first. */
  private readonly completed = new Set<string>();
  /** Reads a key of the store synchronously (the fold may not wait); set when there is a store. */
  loader: ((key: string) => Buffer | undefined) | undefined;
  /** Journals of invocations that have not completed; completed ones stay on disk only. */
  readonly journals = new Map<string, JournalEntry[]>();
  readonly timers = new Map<string, Timer>();
  /** Virtual object / workflow key (`svc/key`) → invocation holding its exclusive lock. */
  readonly locks = new Map<string, string>();
  /** Key → invocations waiting for the lock, in arrival order, with their inbox sequence. */
  readonly inboxes = new Map<string, Array<{ id: string; seq: number }>>();
  /** Key → state entries (state key as base64url → value). */
  readonly objectState = new Map<string, Map<string, Buffer>>();
  /** `svc/key/name` → workflow promise. */
  readonly promises = new Map<string, PromiseState>();
  readonly outbox = new Map<number, OutboxEntry>();
  /** Source partition → last outbox sequence applied from it. */
  readonly dedup = new Map<number, number>();
  counters = { inbox_seq: 0, outbox_seq: 0 };
  private writes = new Map<string, Buffer | null>();

  constructor(readonly partition: number) {}

  get prefix(): string {
    return `p${this.partition}/s/`;
  }

  /**
   * The status of `id`, from memory or else from the store. Both give the same content, so the
   * fold does not depend on what happens to be cached.
   */
  status(id: string): InvocationStatus | undefined {
    const cached = this.invocations.get(id);
    if (cached !== undefined) {
      if (cached.status === 'completed') this.touchCompleted(id);
      return cached;
    }
    const key = this.statusKey(id);
    const raw = this.writes.has(key) ? this.writes.get(key) : this.loader?.(key);
    if (raw === undefined || raw === null) return undefined;
    const s = JSON.parse(raw.toString('utf8')) as InvocationStatus;
    this.invocations.set(id, s);
    if (s.status === 'completed') this.touchCompleted(id);
    return s;
  }

  putStatus(s: InvocationStatus): void {
    this.invocations.set(s.id, s);
    this.writes.set(this.statusKey(s.id), Buffer.from(JSON.stringify(s)));
    if (s.status === 'completed') this.touchCompleted(s.id);
  }

  private touchCompleted(id: string): void {
    this.completed.delete(id);
    this.completed.add(id);
    while (this.completed.size > COMPLETED_IN_MEMORY) {
      const oldest = this.completed.values().next().value as string;
      this.completed.delete(oldest);
      this.invocations.delete(oldest);
    }
  }

  appendEntry(s: InvocationStatus, entry: JournalEntry): number {
    let journal = this.journals.get(s.id);
    if (journal === undefined) {
      journal = [];
      this.journals.set(s.id, journal);
    }
    const index = journal.length;
    if (index !== s.journal_length) throw new Error(`journal of ${s.id} has ${index} entries in memory, status says ${s.journal_length}`);
    journal.push(entry);
    s.journal_length = index + 1;
    this.writes.set(this.entryKey(s.id, index), encodeEntry(entry));
    return index;
  }

  deleteStatus(s: InvocationStatus): void {
    this.invocations.delete(s.id);
    this.completed.delete(s.id);
    this.writes.set(this.statusKey(s.id), null);
  }

  deleteJournal(s: InvocationStatus): void {
    for (let i = 0; i < s.journal_length; i++) this.writes.set(this.entryKey(s.id, i), null);
    this.journals.delete(s.id);
  }

  setLock(objectKey: string, id: string | undefined): void {
    if (id === undefined) {
      this.locks.delete(objectKey);
      this.writes.set(`${this.prefix}lock/${objectKey}`, null);
    } else {
      this.locks.set(objectKey, id);
      this.writes.set(`${this.prefix}lock/${objectKey}`, Buffer.from(id));
    }
  }

  enqueueInbox(objectKey: string, id: string): void {
    const seq = ++this.counters.inbox_seq;
    this.putCounters();
    let q = this.inboxes.get(objectKey);
    if (q === undefined) {
      q = [];
      this.inboxes.set(objectKey, q);
    }
    q.push({ id, seq });
    this.writes.set(`${this.prefix}inbox/${objectKey}/${pad(seq)}`, Buffer.from(id));
  }

  /** Removes `id` from the key's inbox (it starts, or it was killed while waiting). */
  removeFromInbox(objectKey: string, id: string): void {
    const q = this.inboxes.get(objectKey);
    if (q === undefined) return;
    const i = q.findIndex((e) => e.id === id);
    if (i < 0) return;
    const [e] = q.splice(i, 1);
    if (q.length === 0) this.inboxes.delete(objectKey);
    this.writes.set(`${this.prefix}inbox/${objectKey}/${pad(e!.seq)}`, null);
  }

  stateOf(objectKey: string): Map<string, Buffer> {
    return this.objectState.get(objectKey) ?? new Map();
  }

  setState(objectKey: string, stateKey: string, value: Buffer | null): void {
    let m = this.objectState.get(objectKey);
    if (value === null) {
      m?.delete(stateKey);
      if (m?.size === 0) this.objectState.delete(objectKey);
    } else {
      if (m === undefined) {
        m = new Map();
        this.objectState.set(objectKey, m);
      }
      m.set(stateKey, value);
    }
    this.writes.set(`${this.prefix}state/${objectKey}/${stateKey}`, value);
  }

  clearState(objectKey: string): void {
    for (const k of [...this.stateOf(objectKey).keys()]) this.setState(objectKey, k, null);
  }

  putPromise(key: string, p: PromiseState): void {
    this.promises.set(key, p);
    this.writes.set(`${this.prefix}promise/${key}`, Buffer.from(JSON.stringify(p)));
  }

  addOutbox(target: string, command: Buffer): OutboxEntry {
    const entry = { seq: ++this.counters.outbox_seq, target, command };
    this.putCounters();
    this.outbox.set(entry.seq, entry);
    this.writes.set(`${this.prefix}outbox/${pad(entry.seq)}`, Buffer.from(JSON.stringify({ target, command: command.toString('base64') })));
    return entry;
  }

  deleteOutbox(seq: number): void {
    if (!this.outbox.delete(seq)) return;
    this.writes.set(`${this.prefix}outbox/${pad(seq)}`, null);
  }

  setDedup(source: number, seq: number): void {
    this.dedup.set(source, seq);
    this.writes.set(`${this.prefix}dedup/${source}`, Buffer.from(String(seq)));
  }

  private putCounters(): void {
    this.writes.set(`${this.prefix}counters`, Buffer.from(JSON.stringify(this.counters)));
  }

  /** The journal leaves memory when the invocation completes; the store keeps it. */
  forgetJournal(id: string): void {
    this.journals.delete(id);
  }

  putTimer(t: Timer): void {
    const key = this.timerKey(t);
    this.timers.set(key, t);
    this.writes.set(key, Buffer.alloc(0));
  }

  deleteTimer(t: Timer): boolean {
    const key = this.timerKey(t);
    if (!this.timers.delete(key)) return false;
    this.writes.set(key, null);
    return true;
  }

  hasTimer(t: Timer): boolean {
    return this.timers.has(this.timerKey(t));
  }

  /** Hands over the writes of the current batch and starts a new one. */
  takeWrites(): StateWrite[] {
    const out = [...this.writes];
    this.writes = new Map();
    return out;
  }

  statusKey(id: string): string {
    return `${this.prefix}inv/${id}`;
  }

  entryKey(id: string, index: number): string {
    return `${this.prefix}j/${id}/${pad(index, 8)}`;
  }

  timerKey(t: Timer): string {
    return `${this.prefix}timer/${pad(t.wake_up_ms)}/${t.id}/${t.kind}.${t.completion_id}`;
  }
}

export function encodeEntry(e: JournalEntry): Buffer {
  const out = Buffer.allocUnsafe(2 + e.payload.length);
  out.writeUInt16BE(e.type, 0);
  out.set(e.payload, 2);
  return out;
}

export function decodeEntry(raw: Buffer): JournalEntry {
  return { type: raw.readUInt16BE(0), payload: raw.subarray(2) };
}

export function parseTimerKey(key: string, prefix: string): Timer {
  const [wake, id, kindAndCid] = key.slice(`${prefix}timer/`.length).split('/');
  const [kind, cid] = kindAndCid!.split('.');
  return { wake_up_ms: Number(wake), id: id!, completion_id: Number(cid), kind: Number(kind) };
}

/** Store-safe name of a virtual object or workflow instance. */
export function objectKeyOf(service: string, key: string): string {
  return `${encodeURIComponent(service)}/${encodeURIComponent(key)}`;
}

export function promiseKeyOf(service: string, key: string, name: string): string {
  return `${objectKeyOf(service, key)}/${encodeURIComponent(name)}`;
}
