import type { RuleBook } from '../common/limit-rules.js';
import type { Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import type { Registry } from '../metadata/registry.js';
import type { IntrospectionSource } from './introspection.js';
import type { QueryEngine } from './query/engine.js';
import type { EndpointClient } from '../endpoint/client.js';

/** What the admin routes share: configuration, the registry, the partitions' view, SQL. */
export interface AdminContext {
  config: Config;
  registry: Registry;
  logger: Logger;
  source: () => IntrospectionSource;
  engine: QueryEngine;
  /** Partitions that stopped (for `/health`); empty when all run. */
  failures: () => Array<{ partition: number; reason: string }>;
  /** Hands a rule book to the partitions that enforce it; resolves once they hold it durably. */
  applyLimitRules: (book: RuleBook) => Promise<void>;
  /** How the invoker reaches endpoints (the replay check uses it); absent in an admin server without an invoker. */
  endpoints?: EndpointClient;
}
