// Binary frames between the edge and partition threads (issue 23). A structured clone of an invoke
// request and its answer costs ~100 µs of CPU per call (both threads, measured on a 16-core
// machine); one transferred buffer per event-loop turn, holding every frame of the turn, costs
// ~16 µs per call alone and ~4 µs four to a message. Rare requests go as plain messages.
import type { MessagePort } from 'node:worker_threads';
import { assert } from '../common/assert.js';
import { InvocationId } from '../common/ids.js';
import { decodeCommand, encodeCommand, type Invoke } from '../log/commands.js';
import { invocationsTable } from '../storage/tables/invocations.js';
import type { InvokeOutcome, InvokeRequest } from './gateway.js';

/** Frames queued for one port, sent together at the end of the turn (u32 length before each). */
export class FrameBatcher {
  private frames: Buffer[] = [];
  private bytes = 0;
  private scheduled = false;

  constructor(private readonly port: MessagePort | import('node:worker_threads').Worker) {}

  push(frame: Buffer): void {
    this.frames.push(frame);
    this.bytes += 4 + frame.length;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** Sends the frames queued so far now (a message that must not overtake them follows). */
  flush(): void {
    this.scheduled = false;
    if (this.frames.length === 0) return;
    // Its own ArrayBuffer (never the pool's), so it can be transferred.
    const out = Buffer.allocUnsafeSlow(this.bytes);
    let at = 0;
    for (const f of this.frames) {
      at = out.writeUInt32LE(f.length, at);
      at += f.copy(out, at);
    }
    this.frames = [];
    this.bytes = 0;
    this.port.postMessage(out.buffer, [out.buffer]);
  }
}

/** The frames of one message. */
export function* framesOf(buf: ArrayBuffer): Generator<Buffer> {
  const b = Buffer.from(buf);
  for (let at = 0; at < b.length; ) {
    const n = b.readUInt32LE(at);
    yield b.subarray(at + 4, at + 4 + n);
    at += 4 + n;
  }
}

const enum Flag {
  Deterministic = 1,
  Send = 2,
  WorkflowRun = 4,
  Flow = 8,
}

function putString(parts: Buffer[], s: string | undefined): void {
  const b = Buffer.from(s ?? '', 'utf8');
  // 0xffff marks an absent string; scopes and limit keys are far shorter (common/limit-rules.ts).
  assert(b.length < 0xffff, () => `a frame string of ${b.length} bytes`);
  const len = Buffer.allocUnsafe(2);
  len.writeUInt16LE(s === undefined ? 0xffff : b.length);
  parts.push(len, b);
}

/** q: the request's number on its port. */
export function encodeInvokeRequest(q: number, req: InvokeRequest): Buffer {
  const head = Buffer.allocUnsafe(5);
  head.writeUInt32LE(q, 0);
  head[4] = (req.deterministic ? Flag.Deterministic : 0) | (req.send ? Flag.Send : 0) | (req.workflow_run ? Flag.WorkflowRun : 0) | (req.flow ? Flag.Flow : 0);
  const parts: Buffer[] = [head];
  if (req.flow) {
    putString(parts, req.flow.scope);
    putString(parts, req.flow.limit_key);
  }
  parts.push(encodeCommand({ kind: 'invoke', invoke: req.invoke }));
  return Buffer.concat(parts);
}

export function decodeInvokeRequest(frame: Buffer): { q: number; req: InvokeRequest } {
  const q = frame.readUInt32LE(0);
  const flags = frame[4]!;
  let at = 5;
  const str = (): string | undefined => {
    const n = frame.readUInt16LE(at);
    at += 2;
    if (n === 0xffff) return undefined;
    const s = frame.toString('utf8', at, at + n);
    at += n;
    return s;
  };
  const flow = flags & Flag.Flow ? { scope: str()!, limit_key: str() } : undefined;
  const cmd = decodeCommand(frame.subarray(at));
  if (cmd.kind !== 'invoke') throw new Error(`an invoke request carries a ${cmd.kind} command`);
  const invoke: Invoke = cmd.invoke;
  const id = InvocationId.fromBytes(invoke.invocation_id!)!;
  return { q, req: { id, deterministic: !!(flags & Flag.Deterministic), send: !!(flags & Flag.Send), workflow_run: !!(flags & Flag.WorkflowRun), ...(flow ? { flow } : {}), invoke } };
}

/** What a thread sends back: an invoke's outcome, or the statuses a durable batch changed (q: the watch's generation). */
const KINDS = ['completed', 'accepted', 'previously_accepted', 'workflow_exists', 'backlog_full', 'error', 'changes'] as const;

/** An answer: the request's number, the outcome's kind, its JSON (a status as stored, a refusal). */
export function encodeOutcome(q: number, outcome: InvokeOutcome | { kind: 'error'; error: { code?: string; message: string; status?: number; partition?: number; invocation?: string; name: string } }): Buffer {
  const head = Buffer.allocUnsafe(5);
  head.writeUInt32LE(q, 0);
  head[4] = KINDS.indexOf(outcome.kind);
  const body = outcome.kind === 'completed' ? invocationsTable.encode(outcome.status) : outcome.kind === 'backlog_full' ? Buffer.from(JSON.stringify(outcome.full)) : outcome.kind === 'error' ? Buffer.from(JSON.stringify(outcome.error)) : Buffer.alloc(0);
  return Buffer.concat([head, body]);
}

export function decodeOutcome(frame: Buffer): { q: number; kind: (typeof KINDS)[number]; body: Buffer } {
  return { q: frame.readUInt32LE(0), kind: KINDS[frame[4]!]!, body: frame.subarray(5) };
}

/** Status changes of a durable batch: the id, and the status as stored (JSON) or null when purged. */
export type StatusChanges = Array<[id: string, status: Uint8Array | null]>;

const PURGED = 0xffffffff;

/**
 * The statuses a durable batch changed, for the query engine's copy: in the same buffer as the
 * outcomes of the turn and before them, so that the copy has a status before its caller's answer
 * (as when the engine is fed in-process), with no structured clone per batch. `watch` is the
 * generation of the watch they were sent for: frames of a watch turned off and on again (the
 * engine stopped and started) may still be on their way, and describe what the new watch's copy
 * reads from the store.
 */
export function encodeChanges(changes: StatusChanges, watch: number): Buffer {
  assert(Number.isInteger(watch) && watch > 0 && watch <= 0xffffffff, () => `watch generation ${watch}`);
  const head = Buffer.allocUnsafe(5);
  head.writeUInt32LE(watch, 0);
  head[4] = KINDS.indexOf('changes');
  const parts: Buffer[] = [head];
  for (const [id, status] of changes) {
    const head = Buffer.allocUnsafe(6);
    const idBytes = Buffer.from(id, 'latin1');
    head.writeUInt16LE(idBytes.length, 0);
    head.writeUInt32LE(status === null ? PURGED : status.length, 2);
    parts.push(head, idBytes);
    if (status !== null) parts.push(Buffer.from(status.buffer, status.byteOffset, status.byteLength));
  }
  return Buffer.concat(parts);
}

/** The changes of a 'changes' frame's body; the statuses are views of the frame (copy to keep past the message). */
export function decodeChanges(body: Buffer): StatusChanges {
  const out: StatusChanges = [];
  for (let at = 0; at < body.length; ) {
    const idLength = body.readUInt16LE(at);
    const statusLength = body.readUInt32LE(at + 2);
    at += 6;
    const id = body.toString('latin1', at, at + idLength);
    at += idLength;
    if (statusLength === PURGED) out.push([id, null]);
    else {
      out.push([id, body.subarray(at, at + statusLength)]);
      at += statusLength;
    }
  }
  return out;
}
