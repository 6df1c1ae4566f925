// GET /partitions: the health of each partition, for the admin UI's overview. Restate 1.7 shows
// this in its cluster tables (`partition_state`); Keel has one node, so one small route says it:
// whether each partition takes commands, how far its log is applied, how busy it is.

import type { FastifyInstance } from 'fastify';
import { KeelError } from '../errors/index.js';
import type { IntrospectionSource, PartitionInfo } from './introspection.js';

export interface PartitionsRouteOptions {
  source: () => IntrospectionSource;
}

/** A queue this full is about to refuse commands (503): shown as overloaded before it does. */
const OVERLOADED_FRACTION = 0.8;

const KEY_SPACE = 1n << 64n;

/** The partition-key range [start, end] that `Worker.partitionOf` maps to partition `p` of `n`. */
export function keyRange(p: number, n: number): { start: string; end: string } {
  const start = (BigInt(p) * KEY_SPACE + BigInt(n) - 1n) / BigInt(n);
  const next = (BigInt(p + 1) * KEY_SPACE + BigInt(n) - 1n) / BigInt(n);
  return { start: start.toString(), end: (next - 1n).toString() };
}

export function partitionHealth(p: PartitionInfo): 'ok' | 'overloaded' | 'stopped' {
  if (p.closed) return 'stopped';
  if (p.queued_commands >= p.max_queued_commands * OVERLOADED_FRACTION) return 'overloaded';
  return 'ok';
}

export async function partitionRoutes(app: FastifyInstance, opts: PartitionsRouteOptions): Promise<void> {
  app.get('/partitions', async () => {
    const source = opts.source();
    if (!source.partitions) throw new KeelError('KEEL0009', 'partition health is not available on this server');
    const parts = await source.partitions();
    return {
      partitions: parts.map((p) => ({
        id: p.partition,
        health: partitionHealth(p),
        key_range: keyRange(p.partition, parts.length),
        applied_log_position: p.applied_position,
        queued_commands: p.queued_commands,
        writing: p.writing,
        invocations: p.invocations,
        inboxed: p.inboxed,
        timers: p.timers,
        timers_in_memory: p.timers_in_memory,
        outbox: p.outbox,
        ...(p.limit_rules_version !== undefined ? { limit_rules_version: p.limit_rules_version } : {}),
        ...(p.failure ? { failure: p.failure } : {}),
      })),
    };
  });
}
