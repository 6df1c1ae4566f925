import { createHash, hash } from 'node:crypto';
import { assert } from '../common/assert.js';
import { InvocationId } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import { KeelError } from '../errors/index.js';
import { Outcome, type AttemptEnded, type CommandKind } from '../log/commands.js';
import type { InvocationStatus, JournalEntry } from '../partition/state.js';
import { FrameDecoder, encodeFrame } from '../protocol/framing.js';
import { MessageType, REQUESTED_ACK_FLAG, commandTypes, decode, encode, isCustomEntry, pb, type Future } from '../protocol/messages.js';
import { invocationContentType } from '../protocol/versions.js';
import type { EndpointClient, InvocationStream } from '../endpoint/client.js';
import type { ResolvedTarget } from '../metadata/targets.js';
import type { AttemptOutcome } from '../telemetry/metrics.js';
import { ownCopy } from '../common/bytes.js';

export interface AttemptDeployment {
  id: string;
  uri: string;
  use_http_11: boolean;
  additional_headers: Record<string, string>;
  protocol_type: 'BidiStream' | 'RequestResponse';
  /** Function-platform (Lambda) deployment: its qualified ARN. */
  arn?: string;
  assume_role_arn?: string;
}

export interface AttemptOptions {
  status: InvocationStatus;
  journal: readonly JournalEntry[];
  deployment: AttemptDeployment;
  protocol_version: number;
  inactivity_timeout_ms: number;
  abort_timeout_ms: number;
  message_size_limit_bytes: number;
  /** Appends a command to the invocation's partition. */
  append: (kind: CommandKind) => Promise<void>;
  /** Called once the attempt is over, with how it ended (and why, when it failed). */
  onClose: (outcome: AttemptOutcome, failure?: AttemptFailure) => void;
  /** Turns a failure into the AttemptEnded command (adds the retry decision). */
  failed: (f: AttemptFailure) => AttemptEnded;
  /** Eager state for StartMessage; `partial` makes the SDK ask for what is missing. */
  state: { entries: Array<{ key: Buffer; value: Buffer }>; partial: boolean };
  /** Schema facts and the id of a call's target, or why it cannot be called (RT0018). */
  resolveCall: (service: string, handler: string, key: string, idempotencyKey: string | undefined, flow: { scope?: string; limit_key?: string }) => ResolvedTarget | { error_code: string; message: string };
  endpoints: EndpointClient;
  logger: Logger;
  /** The attempt's span (W3C), when traced: sent to the endpoint and carried by the calls it makes. */
  traceparent?: string;
}

export interface AttemptFailure {
  error_code: string;
  failure_code: number;
  message: string;
  related_entry_index?: number;
  related_entry_name?: string;
  related_entry_type?: number;
  next_retry_delay_ms?: number;
  /** 1 = pause, 2 = fail (ErrorMessage.behavior of protocol v7). */
  behavior?: number;
  /** The endpoint asked to be called again after this long (Retry-After of a 429 or 503). */
  retry_after_ms?: number;
}

/**
 * Where an attempt is (Restate's invocation_state_machine.rs: one value, each move asserted):
 *   new          nothing sent yet;
 *   open         both sides of the stream open (bidirectional mode): the endpoint may be sent
 *                notifications; silence for `inactivity_timeout` closes our side;
 *   half-closed  our side closed: the endpoint must end or suspend on what it has; silence for
 *                `abort_timeout` aborts;
 *   closed       the attempt is over (ended, suspended, failed or aborted): nothing more is
 *                recorded or sent, whatever the endpoint still sends.
 */
type Phase = 'new' | 'open' | 'half-closed' | 'closed';
const NEXT: Record<Phase, readonly Phase[]> = { new: ['open', 'closed'], open: ['half-closed', 'closed'], 'half-closed': ['closed'], closed: [] };

/**
 * One attempt of an invocation: sends StartMessage and the journal, then turns every message
 * of the endpoint into a log command. In bidirectional mode it stays open to receive
 * notifications (`forward`) until the endpoint ends, suspends or fails.
 */
export class Attempt {
  readonly id: string;
  readonly epoch: number;
  /** The id parsed once: the StartMessage, the random seed and every recorded command use it. */
  private readonly invocationId: InvocationId;
  private stream: InvocationStream | undefined;
  private decoder: FrameDecoder;
  private phase: Phase = 'new';
  /** The endpoint's response head arrived (a stream cut before it is a network failure, RT0010). */
  private responded = false;
  private sdk_version: string | undefined;
  /** The silence timer of the phase: inactivity while open, abort once half-closed. */
  private silence: NodeJS.Timeout | undefined;
  private readonly bidi: boolean;
  /** Settles once everything this attempt recorded so far is folded and written (or failed to be). */
  private recorded: Promise<void> = Promise.resolve();
  /** Records not settled yet. */
  private recording = 0;

  constructor(private readonly o: AttemptOptions) {
    this.id = o.status.id;
    this.invocationId = InvocationId.parse(o.status.id)!;
    this.epoch = o.status.epoch;
    this.decoder = new FrameDecoder(o.message_size_limit_bytes);
    this.bidi = o.deployment.protocol_type === 'BidiStream' && !o.deployment.use_http_11;
  }

  start(): void {
    try {
      this.open();
    } catch (err) {
      // Whatever the endpoint record holds, an attempt that cannot even start is a failed attempt.
      this.fail({ error_code: 'RT0006', failure_code: 500, message: `cannot start the attempt: ${(err as Error).message}` });
    }
  }

  /** A method, not a comparison: the phase changes under the caller (a message can close the attempt). */
  private isClosed(): boolean {
    return this.phase === 'closed';
  }

  private moveTo(next: Phase): void {
    assert(NEXT[this.phase].includes(next), () => `attempt ${this.epoch} of ${this.id}: ${this.phase} → ${next}`);
    this.phase = next;
  }

  private open(): void {
    const { status, journal, deployment, protocol_version } = this.o;
    const contentType = invocationContentType(protocol_version);
    this.stream = this.o.endpoints.openStream(
      {
        uri: deployment.arn !== undefined ? '' : deployment.uri,
        use_http_11: deployment.use_http_11,
        ...(deployment.arn !== undefined ? { arn: deployment.arn } : {}),
        ...(deployment.assume_role_arn !== undefined ? { assume_role_arn: deployment.assume_role_arn } : {}),
        path: `/invoke/${encodeURIComponent(status.service)}/${encodeURIComponent(status.handler)}`,
        headers: {
          ...deployment.additional_headers,
          'content-type': contentType,
          accept: contentType,
          'x-restate-invocation-id': status.id,
          ...(status.key ? { 'x-restate-service-key': encodeURIComponent(status.key) } : {}),
          ...(this.o.traceparent ? { traceparent: this.o.traceparent } : {}),
        },
      },
      {
        onResponse: (code, headers) => this.onResponse(code, headers, contentType),
        onData: (chunk) => this.onData(chunk),
        onEnd: () => this.onStreamEnd(),
        onError: (err) => this.fail({ error_code: 'RT0010', failure_code: 500, message: `network error talking to ${deployment.uri}: ${err.message}` }),
      },
    );
    // An endpoint client that fails at once has closed the attempt already.
    if (this.isClosed()) return;
    this.moveTo('open');
    const start = encode(pb.Start, {
      id: this.invocationId.bytes,
      debug_id: status.id,
      known_entries: journal.length,
      key: status.key,
      state_map: this.o.state.entries,
      partial_state: this.o.state.partial,
      retry_count_since_last_stored_entry: status.retries_since_command ?? status.retry_count,
      duration_since_last_stored_entry: Math.max(0, Date.now() - (status.command_at_ms ?? status.modified_at_ms)),
      random_seed: randomSeed(this.invocationId),
      ...(status.scope !== undefined ? { scope: status.scope } : {}),
      ...(status.limit_key !== undefined ? { limit_key: status.limit_key } : {}),
    });
    const frames = [encodeFrame(MessageType.Start, start)];
    for (const e of journal) frames.push(encodeFrame(e.type, e.payload));
    this.stream.write(Buffer.concat(frames));
    // Request-response mode sends everything at once; an inactivity timeout of 0 means
    // "suspend at every await point", which is the same as closing our side right away.
    if (!this.bidi || this.o.inactivity_timeout_ms === 0) this.closeInput();
    else this.armInactivity();
  }

  /** Delivers a notification or ack to the endpoint, when the stream can still take it. */
  forward(type: number, payload: Uint8Array): void {
    if (this.phase !== 'open') return;
    this.stream!.write(encodeFrame(type, payload));
    this.armInactivity();
  }

  /** Stops the attempt without recording anything (kill, shutdown). */
  abort(): void {
    if (this.isClosed()) return;
    this.close('abort', 'aborted');
  }

  private onResponse(code: number, headers: Record<string, string | string[] | undefined>, contentType: string): void {
    this.responded = true;
    const server = headers['x-restate-server'];
    if (typeof server === 'string') this.sdk_version = server;
    if (code === 200) {
      const ct = headers['content-type'];
      if (typeof ct === 'string' && ct.split(';')[0]!.trim() !== contentType) {
        this.fail({ error_code: 'RT0012', failure_code: 571, message: `endpoint answered with content-type '${ct}', expected '${contentType}'` });
      }
      return;
    }
    if (code === 429 || code === 503) {
      this.fail(rateLimited(code, headers['retry-after']), 'finish');
      return;
    }
    const byStatus: Record<number, [string, string]> = {
      401: ['RT0006', unauthorized(401)],
      403: ['RT0006', unauthorized(403)],
      413: ['RT0019', 'the endpoint answered 413 Payload Too Large'],
      415: ['RT0015', `the endpoint answered 415: it does not support protocol ${contentType}`],
      502: ['RT0010', 'the endpoint answered 502 Bad Gateway'],
      504: ['RT0010', 'the endpoint answered 504 Gateway Timeout'],
    };
    const [error_code, message] = byStatus[code] ?? ['RT0012', `the endpoint answered HTTP ${code} to the invocation request`];
    this.fail({ error_code, failure_code: code, message });
  }

  private onData(chunk: Buffer): void {
    if (this.isClosed()) return;
    this.armInactivity();
    let frames;
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      const e = err as KeelError;
      this.fail({ error_code: e.code ?? 'RT0012', failure_code: 571, message: e.message });
      return;
    }
    for (const f of frames) {
      if (this.isClosed()) {
        this.o.logger.warn({ code: 'RT0012', invocation: this.id }, `message 0x${f.type.toString(16)} after the end of the attempt ignored`);
        return;
      }
      try {
        this.onMessage(f.type, f.flags, f.payload);
      } catch (err) {
        this.fail({ error_code: 'RT0012', failure_code: 571, message: `cannot decode message 0x${f.type.toString(16)} from the endpoint: ${(err as Error).message}` });
        return;
      }
    }
  }

  private onMessage(type: number, flags: number, payload: Uint8Array): void {
    // Journals stay in memory while their invocation runs or is suspended.
    const entry = ownCopy(payload);
    if (type === MessageType.CallCommand || type === MessageType.OneWayCallCommand) {
      this.call(type, entry);
      return;
    }
    if (commandTypes.has(type) || isCustomEntry(type)) {
      this.record({ kind: 'journal_append', journal_append: this.entry(type, entry) });
      return;
    }
    switch (type) {
      case MessageType.ProposeRunCompletion: {
        const p = decode(pb.ProposeRunCompletion, payload);
        const result = p.failure ? { failure: p.failure } : { value: { content: p.value ?? Buffer.alloc(0) } };
        const notification = Buffer.from(encode(pb.Notification, { completion_id: p.result_completion_id ?? 0, ...result }));
        this.record({
          kind: 'journal_append',
          journal_append: { ...this.entry(MessageType.RunCompletion, notification), requested_ack: (flags & REQUESTED_ACK_FLAG) !== 0 },
        });
        return;
      }
      case MessageType.End:
        this.end({ outcome: Outcome.END });
        return;
      case MessageType.Suspension: {
        const s = decode(pb.Suspension, payload);
        const waiting = { completions: s.waiting_completions ?? [], signals: s.waiting_signals ?? [], named: s.waiting_named_signals ?? [] };
        if (s.awaiting_on) flattenFuture(s.awaiting_on, waiting);
        if (waiting.completions.length + waiting.signals.length + waiting.named.length === 0) {
          this.fail({ error_code: 'RT0012', failure_code: 571, message: 'suspension without anything to wait for' });
          return;
        }
        this.end({
          outcome: Outcome.SUSPENDED,
          waiting_completions: waiting.completions,
          waiting_signals: waiting.signals,
          waiting_named_signals: waiting.named,
        });
        return;
      }
      case MessageType.Error: {
        const e = decode(pb.Error, payload);
        const code = e.code ?? 500;
        const failure: AttemptFailure = {
          error_code: code === 570 ? 'RT0016' : code === 571 ? 'RT0012' : 'RT0007',
          failure_code: code,
          message: e.message ?? '',
        };
        if (e.related_command_index !== undefined) failure.related_entry_index = e.related_command_index;
        if (e.related_command_name) failure.related_entry_name = e.related_command_name;
        if (e.related_command_type !== undefined) failure.related_entry_type = e.related_command_type;
        if (e.next_retry_delay !== undefined) failure.next_retry_delay_ms = Number(e.next_retry_delay);
        if (e.behavior) failure.behavior = e.behavior;
        this.fail(failure, 'finish');
        return;
      }
      case MessageType.AwaitingOn:
        return;
      default:
        this.fail({ error_code: 'RT0012', failure_code: 571, message: `unexpected message type 0x${type.toString(16)} from the endpoint` });
    }
  }

  /** A call or send: the target must exist; its invocation id is chosen here, before the append. */
  private call(type: number, entry: Buffer): void {
    const m = decode(type === MessageType.CallCommand ? pb.Call : pb.OneWayCall, entry);
    // Protocol v7's scope and limit key (empty = none); the fold reads them from the entry.
    const flow = { ...(m.scope ? { scope: m.scope } : {}), ...(m.limit_key ? { limit_key: m.limit_key } : {}) };
    const target = this.o.resolveCall(m.service_name ?? '', m.handler_name ?? '', m.key ?? '', m.idempotency_key || undefined, flow);
    if ('error_code' in target) {
      this.fail({ ...target, failure_code: 500, related_entry_type: type, ...(m.name ? { related_entry_name: m.name } : {}) });
      return;
    }
    this.record({
      kind: 'journal_append',
      journal_append: {
        ...this.entry(type, entry),
        child_invocation_id: target.id.bytes,
        child_service_type: target.service_type,
        child_handler_type: target.handler_type,
        child_completion_retention_ms: target.completion_retention_ms,
        child_journal_retention_ms: target.journal_retention_ms,
        ...(this.o.traceparent ? { traceparent: this.o.traceparent } : {}),
      },
    });
  }

  private entry(type: number, entry: Buffer) {
    return {
      invocation_id: this.invocationId.bytes,
      epoch: this.epoch,
      entry_type: type,
      entry,
      deployment_id: this.o.deployment.id,
      protocol_version: this.o.protocol_version,
    };
  }

  private onStreamEnd(): void {
    if (this.isClosed()) return;
    this.fail(
      {
        error_code: this.responded ? 'RT0012' : 'RT0010',
        failure_code: 571,
        message: 'the endpoint closed the invocation stream without End, Suspension or Error',
      },
      'finish',
    );
  }

  private end(ended: Omit<AttemptEnded, 'invocation_id' | 'epoch'>): void {
    const cmd: AttemptEnded = {
      invocation_id: this.invocationId.bytes,
      epoch: this.epoch,
      deployment_id: this.o.deployment.id,
      protocol_version: this.o.protocol_version,
      ...(this.sdk_version ? { sdk_version: this.sdk_version } : {}),
      ...ended,
    };
    this.record({ kind: 'attempt_ended', attempt_ended: cmd });
    this.close('finish', ended.outcome === Outcome.SUSPENDED ? 'suspended' : 'completed');
  }

  /**
   * `finish` when the endpoint ended the exchange on its own terms (an Error message, the end
   * of its answer); `abort` (a reset) when Keel ends it: timeouts, protocol violations, limits.
   */
  private fail(f: AttemptFailure, how: 'finish' | 'abort' = 'abort'): void {
    if (this.isClosed()) return;
    // A retryable handler error and an endpoint's push-back are expected; the rest are faults.
    const level = f.error_code === 'RT0007' || f.error_code === 'RT0023' ? 'warn' : 'error';
    this.o.logger[level]({ code: f.error_code, invocation: this.id, epoch: this.epoch, failure_code: f.failure_code }, f.message);
    const ended = (): void => {
      const cmd = this.o.failed(f);
      cmd.deployment_id = this.o.deployment.id;
      cmd.protocol_version = this.o.protocol_version;
      if (this.sdk_version) cmd.sdk_version = this.sdk_version;
      this.record({ kind: 'attempt_ended', attempt_ended: cmd });
    };
    // The retry decision counts the attempts of the step under way from the status: it is made
    // once what this attempt recorded before (a step's completion, which starts a new count) is
    // folded, never from a status still behind those appends.
    if (this.recording === 0) ended();
    else void this.recorded.then(ended);
    this.close(how, 'failed', f);
  }

  /** The partition queues appends in call order, so the log sees the endpoint's messages in order. */
  private record(kind: CommandKind): void {
    this.recording += 1;
    this.recorded = this.o.append(kind).then(
      () => {
        this.recording -= 1;
      },
      (err: unknown) => {
        this.recording -= 1;
        this.o.logger.error({ err, invocation: this.id }, 'cannot record a message of the attempt');
      },
    );
  }

  private close(how: 'finish' | 'abort', outcome: AttemptOutcome, failure?: AttemptFailure): void {
    this.moveTo('closed');
    clearTimeout(this.silence);
    if (how === 'finish') this.stream?.finish();
    else this.stream?.abort();
    this.o.onClose(outcome, failure);
  }

  /**
   * Bidirectional mode: after `inactivity_timeout` without any message, ask the endpoint to
   * suspend by closing our side; if it then stays silent for `abort_timeout`, abort (RT0001).
   * Request-response mode has nothing to ask: silence for `abort_timeout` aborts.
   */
  private armInactivity(): void {
    if (this.isClosed()) return;
    // Every message re-arms it: the same timer restarted, not a new one each time.
    if (this.silence !== undefined) {
      this.silence.refresh();
      return;
    }
    this.silence = this.phase === 'half-closed' ? setTimeout(() => this.abortSilent(), this.o.abort_timeout_ms) : setTimeout(() => this.closeInput(), this.o.inactivity_timeout_ms);
  }

  /** Ends our side of the stream: nothing more is delivered to this attempt. */
  private closeInput(): void {
    this.moveTo('half-closed');
    // The open phase's timer gives way to the abort timer.
    clearTimeout(this.silence);
    this.silence = undefined;
    this.stream!.end();
    this.armInactivity();
  }

  private abortSilent(): void {
    this.fail({
      error_code: 'RT0001',
      failure_code: 500,
      message: `no message from the endpoint within the abort timeout (${this.o.abort_timeout_ms} ms)`,
    });
  }
}

/** Why an endpoint refuses a request with 401/403: most often the request identity. */
function unauthorized(code: number): string {
  return (
    `the endpoint refused the invocation request with ${code} ${code === 401 ? 'Unauthorized' : 'Forbidden'}: ` +
    'if it verifies request identity (identityKeys), it must list the publickeyv1_… Keel logs at startup ' +
    '(worker.invoker.request_identity_private_key_pem_file); otherwise check the credentials in the deployment\'s additional_headers'
  );
}

/** RT0023: the endpoint (or a proxy) pushes back with 429 or 503, maybe saying for how long. */
function rateLimited(code: number, retryAfter: string | string[] | undefined): AttemptFailure {
  const retry_after_ms = parseRetryAfter_ms(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, Date.now());
  const wait = retry_after_ms === undefined ? '' : `, Retry-After ${Math.round(retry_after_ms / 1000)} s`;
  return {
    error_code: 'RT0023',
    failure_code: code,
    message: `the endpoint is rate limited: it answered ${code} ${code === 429 ? 'Too Many Requests' : 'Service Unavailable'}${wait}`,
    ...(retry_after_ms !== undefined ? { retry_after_ms } : {}),
  };
}

/**
 * `Retry-After` as delta-seconds or an HTTP date (RFC 9110 §10.2.3), in ms from `now_ms`;
 * undefined when absent, unreadable or in the past (then the retry policy decides).
 */
export function parseRetryAfter_ms(value: string | undefined, now_ms: number): number | undefined {
  const text = value?.trim();
  if (text === undefined || text === '') return undefined;
  if (/^\d{1,12}$/.test(text)) return Number(text) * 1000;
  const at_ms = Date.parse(text);
  if (!Number.isFinite(at_ms) || !/[a-z]/i.test(text)) return undefined;
  return at_ms > now_ms ? at_ms - now_ms : undefined;
}

function flattenFuture(f: Future, into: { completions: number[]; signals: number[]; named: string[] }): void {
  into.completions.push(...(f.waiting_completions ?? []));
  into.signals.push(...(f.waiting_signals ?? []));
  into.named.push(...(f.waiting_named_signals ?? []));
  for (const n of f.nested_futures ?? []) flattenFuture(n, into);
}

/** Stable across retries and restarts: derived from the invocation id (53 bits, exact in JS). */
function randomSeed(id: InvocationId): number {
  // crypto.hash (one shot, Node >= 20.12) is several times cheaper than a Hash object.
  const h = typeof hash === 'function' ? (hash('sha256', id.bytes, 'buffer') as Buffer) : createHash('sha256').update(id.bytes).digest();
  return h.readUIntBE(0, 6) * 32 + (h[6]! >> 3);
}
