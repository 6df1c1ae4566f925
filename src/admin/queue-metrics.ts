// What /metrics samples at scrape time from the partitions, the invoker and the endpoint
// connections of one thread (the main thread's, or each partition thread's: their samples are
// summed, threads/partition-threads.ts).
import type { Config } from '../config/index.js';
import type { EndpointClient } from '../endpoint/client.js';
import type { Invoker } from '../invoker/index.js';
import type { Worker } from '../partition/worker.js';
import { directorySize_bytes } from '../telemetry/disk.js';
import type { KeelMetrics } from '../telemetry/metrics.js';

/** `stores`: whether this thread reports the stores' sizes on disk (one thread does). */
export function sampleQueues(metrics: KeelMetrics, config: Config, worker: Worker, invoker: Invoker, endpoints: EndpointClient, { stores = true } = {}): void {
  metrics.sample({
    invoker: () => invoker.depths(),
    endpoints: () => endpoints.http2Stats(),
    partitions: () =>
      worker.processors.map((p) => {
        const invocations = new Map(Object.entries(p.state.counters.statuses));
        return { partition: p.partition, queued_commands: p.info().queued_commands, outbox_entries: p.state.counters.outbox, invocations };
      }),
    storeSizes: async () =>
      stores
        ? [
            { store: 'worker', bytes: await directorySize_bytes(config.worker.storage_db.path) },
            { store: 'meta', bytes: await directorySize_bytes(config.meta.storage_path) },
          ]
        : [],
    flowRules: () => {
      const out = new Map<string, { running: number; queued: number; throttled: number }>();
      for (const p of worker.processors) p.state.flow.perRule(out);
      return out;
    },
  });
}
