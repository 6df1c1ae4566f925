// Telemetry: what the hot paths report and how it leaves the process. Metrics are always on
// (cheap cells read at scrape time); traces only when `tracing.endpoint` is configured.
import type { Logger } from '../common/logger.js';
import { KeelMetrics } from './metrics.js';
import { NO_TRACING, type Tracing } from './tracing.js';

export { KeelMetrics } from './metrics.js';
export type { AttemptOutcome, CompletionOutcome, MetricSources, PartitionCells, TargetCells } from './metrics.js';
export { NO_TRACING, type AttemptSpan, type IngressSpan, type Tracing } from './tracing.js';
export { formatTraceparent, invocationSpanId, parseTraceparent, traceIdOf } from './traceparent.js';

/** The metrics and the tracing handed to the worker, the invoker and the ingress. */
export interface Telemetry {
  readonly metrics: KeelMetrics;
  readonly tracing: Tracing;
}

/** Telemetry for a component used on its own (tests, benchmarks): fresh metrics, no tracing. */
export function standaloneTelemetry(): Telemetry {
  return { metrics: new KeelMetrics(), tracing: NO_TRACING };
}

/** Tracing as configured: OTLP export to `endpoint`, or none (nothing loaded, nothing done) without one. */
export async function createTracing(endpoint: string | undefined, logger: Logger): Promise<Tracing> {
  if (endpoint === undefined) return NO_TRACING;
  const { otlpTracing } = await import('./otlp.js');
  return otlpTracing(endpoint, logger);
}
