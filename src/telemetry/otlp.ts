// The OpenTelemetry side of tracing, loaded only when `tracing.endpoint` is configured: without
// it the @opentelemetry packages are not even imported.
import { defaultTextMapGetter, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  RandomIdGenerator,
  TracerProvider,
  type IdGenerator,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import type { Logger } from '../common/logger.js';
import { formatTraceparent, invocationSpanId, parseTraceparent } from './traceparent.js';
import type { AttemptSpan, CompletedInvocation, IngressSpan, TracedInvocation, Tracing } from './tracing.js';

/** Spans wait at most this long before they are exported, in batches of up to 512. */
const EXPORT_DELAY_MS = 1_000;
/** Spans beyond this many waiting for export are dropped (a slow receiver cannot grow memory). */
const MAX_QUEUED_SPANS = 8_192;
/** How long a stopping server waits for its last spans to be exported. */
const SHUTDOWN_GRACE_MS = 2_000;
/** Export failures are logged at most once per this interval, with the count of dropped spans. */
const FAILURE_LOG_INTERVAL_MS = 60_000;

/** Tracing that exports over OTLP/HTTP (protobuf) to `endpoint`. */
export function otlpTracing(endpoint: string, logger: Logger): Tracing {
  const exporter = new ReportingExporter(new OTLPTraceExporter({ url: tracesUrl(endpoint) }), logger);
  const ids = new ChosenSpanIds();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'keel' }),
    sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
    idGenerator: ids,
    spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: EXPORT_DELAY_MS, maxQueueSize: MAX_QUEUED_SPANS, maxExportBatchSize: 512 })],
  });
  return new OtelTracing(provider, provider.getTracer('keel'), ids);
}

/** `http://host:4318` means the standard path `/v1/traces`; a URL with a path is used as it is. */
export function tracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/v1/traces';
  return url.toString();
}

class OtelTracing implements Tracing {
  readonly enabled = true;
  private readonly propagator = new W3CTraceContextPropagator();

  constructor(
    private readonly provider: TracerProvider,
    private readonly tracer: Tracer,
    private readonly ids: ChosenSpanIds,
  ) {}

  ingress(headers: Record<string, string | string[] | undefined>): IngressSpan {
    const parent = this.propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    const span = this.tracer.startSpan('ingress', { kind: SpanKind.SERVER }, parent);
    return {
      traceparent: traceparentOf(span),
      target(service, handler, invocationId) {
        span.updateName(`ingress ${service}/${handler}`);
        span.setAttributes({ 'rpc.service': service, 'rpc.method': handler, 'restate.invocation.id': invocationId });
      },
      end(status) {
        span.setAttribute('http.response.status_code', status);
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
      },
    };
  }

  attempt(inv: TracedInvocation, epoch: number, deployment_id: string): AttemptSpan | undefined {
    const parent = this.invocationContext(inv);
    if (parent === undefined) return undefined;
    const span = this.tracer.startSpan(
      `attempt ${inv.service}/${inv.handler}`,
      { kind: SpanKind.CLIENT, attributes: { ...invocationAttributes(inv), 'restate.invocation.epoch': epoch, 'restate.deployment.id': deployment_id } },
      parent,
    );
    return {
      traceparent: traceparentOf(span),
      end(outcome, failure) {
        span.setAttribute('restate.attempt.outcome', outcome);
        if (failure !== undefined) {
          span.setAttribute('restate.error.code', failure.error_code);
          span.setStatus({ code: SpanStatusCode.ERROR, message: failure.message });
        }
        span.end();
      },
    };
  }

  invocationCompleted(inv: CompletedInvocation): void {
    const parent = parseTraceparent(inv.traceparent);
    if (parent === undefined) return;
    const context = trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.trace_id, spanId: parent.span_id, traceFlags: parent.flags & 1, isRemote: true });
    const attributes: Attributes = { ...invocationAttributes(inv), 'restate.invocation.outcome': inv.outcome, 'restate.invocation.retry_count': inv.retry_count };
    // The span was "started" at acceptance: its id is the one every attempt already names.
    this.ids.chosen = invocationSpanId(inv.id);
    const span = this.tracer.startSpan(`invocation ${inv.service}/${inv.handler}`, { kind: SpanKind.INTERNAL, startTime: inv.created_at_ms, attributes }, context);
    this.ids.chosen = undefined;
    if (inv.failure !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: `[${inv.failure.code}] ${inv.failure.message}` });
    span.end(inv.completed_at_ms);
  }

  /** Exports what is left, but never holds the process for longer than the grace period. */
  async shutdown(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), SHUTDOWN_GRACE_MS)));
    const outcome = await Promise.race([this.provider.shutdown().then(() => 'done' as const), late]);
    clearTimeout(timer);
    if (outcome === 'late') throw new Error(`the OTLP receiver did not take the last spans within ${SHUTDOWN_GRACE_MS} ms`);
  }

  /** The invocation span's context (remote: it is exported by whoever sees the completion). */
  private invocationContext(inv: TracedInvocation) {
    const parent = parseTraceparent(inv.traceparent);
    if (parent === undefined) return undefined;
    return trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.trace_id, spanId: invocationSpanId(inv.id), traceFlags: parent.flags & 1, isRemote: true });
  }
}

function invocationAttributes(inv: TracedInvocation): Attributes {
  return {
    'restate.invocation.id': inv.id,
    'restate.invocation.target': inv.key ? `${inv.service}/${inv.key}/${inv.handler}` : `${inv.service}/${inv.handler}`,
    'rpc.service': inv.service,
    'rpc.method': inv.handler,
    ...(inv.key ? { 'restate.invocation.key': inv.key } : {}),
  };
}

function traceparentOf(span: Span): string {
  const c = span.spanContext();
  return formatTraceparent({ trace_id: c.traceId, span_id: c.spanId, flags: c.traceFlags });
}

/** Random ids, except the one span id chosen for the next span (the invocation span). */
class ChosenSpanIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  chosen: string | undefined;

  generateTraceId(): string {
    return this.random.generateTraceId();
  }

  generateSpanId(): string {
    const chosen = this.chosen;
    this.chosen = undefined;
    return chosen ?? this.random.generateSpanId();
  }
}

/** Passes spans on to the OTLP exporter and logs failed exports (KEEL0601), at most once a minute. */
class ReportingExporter implements SpanExporter {
  private dropped = 0;
  private lastLog_ms = 0;

  constructor(
    private readonly inner: SpanExporter,
    private readonly logger: Logger,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) this.failed(spans.length, result.error);
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }

  private failed(spans: number, err: Error | undefined): void {
    this.dropped += spans;
    const now = Date.now();
    if (now - this.lastLog_ms < FAILURE_LOG_INTERVAL_MS) return;
    this.lastLog_ms = now;
    this.logger.warn({ code: 'KEEL0601', dropped_spans: this.dropped, err: err?.message }, 'cannot export traces: spans dropped');
    this.dropped = 0;
  }
}
