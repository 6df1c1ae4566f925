import type { FastifyInstance } from 'fastify';
import { keelError } from '../../errors/index.js';
import type { SubscriptionSchema } from '../../metadata/registry.js';
import { isSubscriptionId } from '../../metadata/subscriptions.js';
import type { SubscriptionStatus } from '../../subscriptions/manager.js';
import type { AdminContext } from '../context.js';

function subscriptionView(s: SubscriptionSchema): { id: string; source: string; sink: string; options: Record<string, string> } {
  return { id: s.id, source: s.source, sink: s.sink, options: s.options };
}

const iso = (ms: number | null | undefined): string | null => (ms === null || ms === undefined ? null : new Date(ms).toISOString());

/**
 * `GET /subscriptions/{id}/status` (Keel's own): the consumer's state and, per topic partition,
 * Keel's stored position (the next offset to deliver), Kafka's high watermark and the lag.
 */
function statusView(s: SubscriptionSchema, status: SubscriptionStatus | undefined) {
  return {
    id: s.id,
    source: s.source,
    sink: s.sink,
    consumer_group: status?.consumer_group ?? null,
    state: status?.state ?? 'stopped',
    reason: status?.reason ?? null,
    pending_invocations: status?.pending_invocations ?? 0,
    max_pending_invocations: status?.max_pending_invocations ?? null,
    last_warning: status?.last_warning ? { code: status.last_warning.code, message: status.last_warning.message, at: iso(status.last_warning.at_ms) } : null,
    lag_read_at: iso(status?.lag_read_at_ms),
    partitions: (status?.partitions ?? []).map(({ position_updated_at_ms, ...p }) => ({ ...p, position_updated_at: iso(position_updated_at_ms) })),
  };
}

/** Clusters come from the config file: created and last modified when this server started. */
const STARTED_AT = new Date().toISOString();

function clusterView(c: { name: string; properties: Record<string, string> }) {
  return { name: c.name, properties: { ...c.properties }, created_at: STARTED_AT, modified_at: STARTED_AT };
}

interface SubscriptionBody {
  source?: unknown;
  sink?: unknown;
  options?: unknown;
}

/** `/subscriptions` and `/kafka-clusters`. Validation of source, sink and options is META0009, in the registry. */
export function subscriptionRoutes(ctx: AdminContext) {
  const { registry } = ctx;
  const subscriptionOr404 = (id: string) => {
    if (!isSubscriptionId(id)) throw keelError('KEEL0003', { what: 'subscription', value: id });
    const s = registry.subscription(id);
    if (!s) throw keelError('KEEL0004', { what: 'subscription', name: id });
    return s;
  };
  return async (r: FastifyInstance) => {
    r.post<{ Body: SubscriptionBody | undefined }>('/subscriptions', { schema: { body: { type: 'object' } } }, async (req, reply) => {
      const b = req.body ?? {};
      const sub = await registry.addSubscription({ source: b.source, sink: b.sink, options: b.options });
      return reply.status(201).header('location', `subscriptions/${sub.id}`).send(subscriptionView(sub));
    });
    r.get('/subscriptions', async () => ({ subscriptions: registry.subscriptions().map(subscriptionView) }));
    r.get<{ Params: { id: string } }>('/subscriptions/:id', async (req) => subscriptionView(subscriptionOr404(req.params.id)));
    r.get<{ Params: { id: string } }>('/subscriptions/:id/status', async (req) => {
      const s = subscriptionOr404(req.params.id);
      const [status] = (await ctx.source().subscriptions?.(s.id)) ?? [];
      return statusView(s, status);
    });
    r.delete<{ Params: { id: string } }>('/subscriptions/:id', async (req, reply) => {
      subscriptionOr404(req.params.id);
      await registry.removeSubscription(req.params.id);
      return reply.status(202).send();
    });

    r.get('/kafka-clusters', async () => ({ clusters: registry.kafkaClusters().map(clusterView) }));
    r.get<{ Params: { name: string } }>('/kafka-clusters/:name', async (req) => {
      const c = registry.kafkaClusters().find((x) => x.name === req.params.name);
      if (!c) throw keelError('KEEL0004', { what: 'kafka cluster', name: req.params.name });
      return clusterView(c);
    });
  };
}
