import type { FastifyInstance } from 'fastify';
import { createAdminServer } from './admin/server.js';
import { splitAddress, type Config } from './config/index.js';
import { createLogger, type Logger } from './common/logger.js';
import { KeelError } from './errors/index.js';
import { createIngressServer } from './ingress/server.js';
import { Invoker } from './invoker/index.js';
import { DEFAULT_ENDPOINT_CLIENT_OPTIONS, EndpointClient } from './endpoint/client.js';
import { RequestSigner } from './endpoint/identity.js';
import { Registry } from './metadata/registry.js';
import { Worker } from './partition/worker.js';
import { WorkerIntrospection } from './admin/partition-source.js';
import { openWorkerStore, type Db } from './storage/store.js';

/** A running Keel node: store, registry, partitions, invoker, ingress and admin servers. */
export class KeelServer {
  private constructor(
    readonly config: Config,
    readonly logger: Logger,
    readonly db: Db,
    readonly registry: Registry,
    readonly worker: Worker,
    readonly invoker: Invoker,
    readonly endpoints: EndpointClient,
    readonly ingress: FastifyInstance,
    readonly admin: FastifyInstance,
  ) {}

  static async start(config: Config, logger = createLogger(config.log.level, config.log.format)): Promise<KeelServer> {
    // A bad key refuses startup (RT0002) before anything is opened.
    const signer = loadSigner(config, logger);
    const db = await openWorkerStore(config.worker.storage_db.path);
    let registry: Registry | undefined;
    try {
      registry = await Registry.open(config, logger.child({ component: 'metadata' }), signer !== undefined ? { signer } : {});
      const worker = new Worker(config, logger.child({ component: 'worker' }));
      await worker.open(db);
      const endpoints = new EndpointClient({
        ...DEFAULT_ENDPOINT_CLIENT_OPTIONS,
        http2: { ...DEFAULT_ENDPOINT_CLIENT_OPTIONS.http2, connect_timeout_ms: config.worker.invoker.connect_timeout_ms },
        ...(signer !== undefined ? { signer } : {}),
      });
      const invoker = new Invoker(config, registry, endpoints, logger.child({ component: 'invoker' }));
      const ingress = await createIngressServer({ config, registry, worker, logger });
      const admin = await createAdminServer({ config, registry, logger, introspection: new WorkerIntrospection(worker), failures: () => worker.failures() });
      await listen(ingress, config.ingress.bind_address, 'ingress');
      try {
        await listen(admin, config.admin.bind_address, 'admin');
      } catch (err) {
        await ingress.close();
        throw err;
      }
      worker.start(invoker);
      logger.info(
        { ingress: config.ingress.bind_address, admin: config.admin.bind_address, partitions: config.worker.partitions, fsync: config.worker.storage_db.fsync },
        'keel is ready',
      );
      return new KeelServer(config, logger, db, registry, worker, invoker, endpoints, ingress, admin);
    } catch (err) {
      await registry?.close().catch(() => {});
      await db.close().catch(() => {});
      throw err;
    }
  }

  async stop(): Promise<void> {
    await Promise.allSettled([this.ingress.close(), this.admin.close()]);
    await this.worker.stop();
    this.endpoints.close();
    await this.registry.close();
    await this.db.close();
  }
}

/** The request identity key, when configured; its public key is logged for the endpoints' identityKeys. */
function loadSigner(config: Config, logger: Logger): RequestSigner | undefined {
  const file = config.worker.invoker.request_identity_private_key_pem_file;
  if (file === undefined) return undefined;
  const signer = RequestSigner.fromPemFile(file, config.worker.invoker.request_identity_expiration_ms);
  logger.info(
    { kid: signer.publicKey, path: file },
    `Loaded request identity key: requests to endpoints are signed; endpoints verify them with identityKeys: ["${signer.publicKey}"]`,
  );
  return signer;
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
