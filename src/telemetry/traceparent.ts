import { createHash } from 'node:crypto';

// W3C Trace Context (`traceparent: 00-<trace id>-<parent span id>-<flags>`), as Keel keeps it
// with an invocation: the context of the span that asked for the invocation (the ingress
// request, or the attempt that called it). The invocation's own span id is derived from its
// id, so that every attempt, before or after a restart, names the same parent span.

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

export interface TraceContext {
  trace_id: string;
  span_id: string;
  /** W3C trace flags; bit 0 is "sampled". */
  flags: number;
}

export function parseTraceparent(value: string | undefined): TraceContext | undefined {
  const m = value === undefined ? null : TRACEPARENT.exec(value);
  if (m === null || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { trace_id: m[1]!, span_id: m[2]!, flags: parseInt(m[3]!, 16) };
}

export function formatTraceparent(c: TraceContext): string {
  return `00-${c.trace_id}-${c.span_id}-${c.flags.toString(16).padStart(2, '0')}`;
}

/** The trace id of a stored traceparent (for `sys_invocation.trace_id`), or undefined. */
export function traceIdOf(traceparent: string | undefined): string | undefined {
  return parseTraceparent(traceparent)?.trace_id;
}

/** The span id of an invocation's span: the same for every attempt and across restarts. */
export function invocationSpanId(invocationId: string): string {
  const id = createHash('sha256').update(invocationId).digest('hex').slice(0, 16);
  // An all-zero span id is invalid; 2^-64 odds, but a wrong span is worse than a branch.
  return id === '0000000000000000' ? '0000000000000001' : id;
}
