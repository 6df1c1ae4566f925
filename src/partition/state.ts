import type { StateWrite } from '../log/partition-log.js';
import { pad } from '../storage/store.js';

export type Status = 'scheduled' | 'running' | 'backing-off' | 'suspended' | 'paused' | 'completed';

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
  status: Status;
  /** Attempt number; entries from any other attempt are dropped. */
  epoch: number;
  journal_length: number;
  created_at_ms: number;
  modified_at_ms: number;
  idempotency_key?: string;
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
}

/** What a fold asks for once its batch is durable. */
export type Action =
  | { kind: 'start'; id: string; epoch: number }
  | { kind: 'forward'; id: string; epoch: number; type: number; payload: Uint8Array }
  | { kind: 'timer'; timer: Timer }
  | { kind: 'retry'; id: string; epoch: number; at_ms: number }
  | { kind: 'completed'; id: string };

/**
 * The state of one partition, in memory, written through to the store. Folds change it only
 * through these methods, which record every store write of the current batch.
 */
export class PartitionState {
  readonly invocations = new Map<string, InvocationStatus>();
  /** Journals of invocations that have not completed; completed ones stay on disk only. */
  readonly journals = new Map<string, JournalEntry[]>();
  readonly timers = new Map<string, Timer>();
  private writes = new Map<string, Buffer | null>();

  constructor(readonly partition: number) {}

  get prefix(): string {
    return `p${this.partition}/s/`;
  }

  putStatus(s: InvocationStatus): void {
    this.invocations.set(s.id, s);
    this.writes.set(this.statusKey(s.id), Buffer.from(JSON.stringify(s)));
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
    return `${this.prefix}timer/${pad(t.wake_up_ms)}/${t.id}/${t.completion_id}`;
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
  const [wake, id, cid] = key.slice(`${prefix}timer/`.length).split('/');
  return { wake_up_ms: Number(wake), id: id!, completion_id: Number(cid) };
}
