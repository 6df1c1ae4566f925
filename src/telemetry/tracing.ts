import type { AttemptOutcome, CompletionOutcome } from './metrics.js';

// Three spans per traced invocation, all in the caller's trace:
//   ingress {svc}/{handler}     SERVER, the HTTP request (child of the caller's traceparent)
//   └ invocation {svc}/{handler}  INTERNAL, from acceptance to completion; its span id derives from
//     │                          the invocation id, so it survives suspensions and restarts, and is
//     │                          exported once, when the invocation completes
//     └ attempt {svc}/{handler}  CLIENT, one per attempt; its context goes to the endpoint as
//                                `traceparent`, and to the invocations it calls.

/** The span of one ingress request. */
export interface IngressSpan {
  /** What the invocation keeps durably: this span's context, the parent of the invocation span. */
  readonly traceparent: string;
  target(service: string, handler: string, invocationId: string): void;
  end(status: number): void;
}

/** The span of one attempt. */
export interface AttemptSpan {
  /** Sent to the endpoint and carried by the calls the attempt makes. */
  readonly traceparent: string;
  end(outcome: AttemptOutcome, failure?: { error_code: string; message: string }): void;
}

export interface TracedInvocation {
  id: string;
  service: string;
  handler: string;
  key: string;
  /** The context of the span that asked for the invocation; untraced without it. */
  traceparent?: string;
}

export interface CompletedInvocation extends TracedInvocation {
  created_at_ms: number;
  completed_at_ms: number;
  retry_count: number;
  outcome: CompletionOutcome;
  failure?: { code: number; message: string };
}

/**
 * What the ingress, the invoker and the worker call. When tracing is off every method returns
 * at once without allocating: callers test `enabled` before gathering arguments.
 */
export interface Tracing {
  readonly enabled: boolean;
  ingress(headers: Record<string, string | string[] | undefined>): IngressSpan | undefined;
  attempt(invocation: TracedInvocation, epoch: number, deployment_id: string): AttemptSpan | undefined;
  invocationCompleted(invocation: CompletedInvocation): void;
  shutdown(): Promise<void>;
}

export const NO_TRACING: Tracing = {
  enabled: false,
  ingress: () => undefined,
  attempt: () => undefined,
  invocationCompleted: () => {},
  shutdown: async () => {},
};
