// GET /metrics: every keel_* metric and the process metrics in the Prometheus text format, for a
// Prometheus server (or any OpenMetrics-compatible agent) to scrape. The exposition itself is
// telemetry's; this route only serves it.

import type { FastifyInstance } from 'fastify';
import type { KeelMetrics } from '../telemetry/metrics.js';

export interface MetricsRouteOptions {
  metrics: KeelMetrics;
}

export async function metricsRoutes(app: FastifyInstance, opts: MetricsRouteOptions): Promise<void> {
  app.get('/metrics', async (_req, reply) => {
    const { contentType, body } = await opts.metrics.text();
    return reply.type(contentType).header('cache-control', 'no-store').send(body);
  });
}
