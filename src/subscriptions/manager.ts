// The subscription manager: one consumer (a `SubscriptionRunner`) per subscription of the
// registry, started when the server starts or the subscription is created, stopped when it is
// deleted or the server stops. Consumers live beside the partitions: a broker that is down, a
// topic that does not exist or a sink that is gone pauses or slows one subscription, never the
// server.

import type { Config, KafkaCluster } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { parseSource } from '../metadata/subscriptions.js';
import type { SubscriptionEvent, SubscriptionSchema } from '../metadata/registry.js';
import { createKafkaConsumer } from './index.js';
import type { SubscriptionPartitions } from './partitions.js';
import { SubscriptionRunner, type CreateConsumer, type SinkLookup, type SubscriptionStatus } from './runner.js';

export type { SubscriptionPartitionStatus, SubscriptionStatus } from './runner.js';

/** What the manager needs of the schema registry. */
export interface SubscriptionRegistry extends SinkLookup {
  subscriptions(): SubscriptionSchema[];
  kafkaClusters(): KafkaCluster[];
  onSubscriptionChange(listener: (e: SubscriptionEvent) => void): () => void;
}

export interface ManagerDeps {
  config: Config;
  registry: SubscriptionRegistry;
  partitions: SubscriptionPartitions;
  logger: Logger;
  /** Replaces the Kafka client (tests). */
  createConsumer?: CreateConsumer;
}

export class SubscriptionManager {
  private readonly runners = new Map<string, SubscriptionRunner>();
  private readonly stopping = new Set<Promise<void>>();
  private unlisten: (() => void) | undefined;
  private stopped = false;

  constructor(private readonly deps: ManagerDeps) {}

  /** Starts a consumer for every subscription, and follows the registry from now on. */
  start(): void {
    this.unlisten = this.deps.registry.onSubscriptionChange((e) => (e.kind === 'added' ? this.add(e.subscription) : this.remove(e.id)));
    for (const s of this.deps.registry.subscriptions()) this.add(s);
  }

  /** Stops every consumer (each leaves its group); the partitions keep running. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unlisten?.();
    const all = [...this.runners.values()].map((r) => r.stop());
    this.runners.clear();
    await Promise.allSettled([...all, ...this.stopping]);
  }

  /** Status of one subscription (undefined when it has no consumer here), or of all. */
  async status(id?: string): Promise<SubscriptionStatus[]> {
    const runners = id === undefined ? [...this.runners.values()] : [this.runners.get(id)].filter((r) => r !== undefined);
    return Promise.all(runners.map((r) => r.status()));
  }

  private add(s: SubscriptionSchema): void {
    if (this.stopped || this.runners.has(s.id)) return;
    const cluster = this.deps.registry.kafkaClusters().find((c) => c.name === parseSource(s.source).cluster);
    const runner = new SubscriptionRunner(s, cluster, {
      config: this.deps.config,
      registry: this.deps.registry,
      partitions: this.deps.partitions,
      logger: this.deps.logger,
      createConsumer: this.deps.createConsumer ?? createKafkaConsumer,
    });
    this.runners.set(s.id, runner);
    runner.start();
  }

  private remove(id: string): void {
    const runner = this.runners.get(id);
    if (runner === undefined) return;
    this.runners.delete(id);
    const done = runner
      .stop()
      .then(() => this.deps.logger.info({ subscription: id }, 'subscription stopped consuming'))
      .catch((err: Error) => this.deps.logger.warn({ err, code: 'KEEL0701', subscription: id }, 'stopping the consumer of a deleted subscription failed'))
      .finally(() => this.stopping.delete(done));
    this.stopping.add(done);
  }
}
