import type { FastifyInstance } from 'fastify';
import { createAdminServer } from './admin/server.js';
import { splitAddress, type Config } from './config/index.js';
import { createLogger, type Logger } from './common/logger.js';
import { KeelError } from './errors/index.js';
import { createIngressServer } from './ingress/server.js';
import { Invoker } from './invoker/index.js';
import { EndpointClient } from './endpoint/client.js';
import { Registry } from './metadata/registry.js';
import { Worker } from './partition/worker.js';
import { WorkerIntrospection } from './admin/partition-source.js';
import { openWorkerStore, type Db } from './storage/store.js';
import { SubscriptionManager } from './subscriptions/manager.js';

/** A running Keel node: store, registry, partitions, invoker, ingress and admin servers. */
export class KeelServer {
  private constructor(
    readonly config: Config,
    readonly logger: Logger,
    readonly db: Db,
    readonly registry: Registry,
    readonly worker: Worker,
    readonly subscriptions: SubscriptionManager,
    readonly invoker: Invoker,
    readonly endpoints: EndpointClient,
    readonly ingress: FastifyInstance,
    readonly admin: FastifyInstance,
  ) {}

  static async start(config: Config, logger = createLogger(config.log.level, config.log.format)): Promise<KeelServer> {
    const db = await openWorkerStore(config.worker.storage_db.path);
    let registry: Registry | undefined;
    try {
      registry = await Registry.open(config, logger.child({ component: 'metadata' }));
      const worker = new Worker(config, logger.child({ component: 'worker' }));
      await worker.open(db);
      const endpoints = new EndpointClient();
      const invoker = new Invoker(config, registry, endpoints, logger.child({ component: 'invoker' }));
      const subscriptions = new SubscriptionManager({ config, registry, worker, logger: logger.child({ component: 'subscriptions' }) });
      const ingress = await createIngressServer({ config, registry, worker, logger });
      const introspection = new WorkerIntrospection(worker, subscriptions);
      const admin = await createAdminServer({ config, registry, logger, introspection, failures: () => worker.failures() });
      await listen(ingress, config.ingress.bind_address, 'ingress');
      try {
        await listen(admin, config.admin.bind_address, 'admin');
      } catch (err) {
        await ingress.close();
        throw err;
      }
      worker.start(invoker);
      // Consumers start once the partitions have recovered: positions are read from them.
      subscriptions.start();
      logger.info(
        { ingress: config.ingress.bind_address, admin: config.admin.bind_address, partitions: config.worker.partitions, fsync: config.worker.storage_db.fsync },
        'keel is ready',
      );
      return new KeelServer(config, logger, db, registry, worker, subscriptions, invoker, endpoints, ingress, admin);
    } catch (err) {
      await registry?.close().catch(() => {});
      await db.close().catch(() => {});
      throw err;
    }
  }

  async stop(): Promise<void> {
    await Promise.allSettled([this.ingress.close(), this.admin.close(), this.subscriptions.stop()]);
    await this.worker.stop();
    this.endpoints.close();
    await this.registry.close();
    await this.db.close();
  }
}

async function listen(app: FastifyInstance, address: string, what: string): Promise<void> {
  const { host, port } = splitAddress(address);
  try {
    await app.listen({ host, port });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL' || code === 'EPERM') {
      throw new KeelError('RT0004', `cannot bind the ${what} address ${address}: ${code === 'EADDRINUSE' ? 'address in use' : code === 'EADDRNOTAVAIL' ? 'address not available' : 'permission denied'}`, 500, { cause: err });
    }
    throw err;
  }
}
