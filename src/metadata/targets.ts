import type { Config } from '../config/index.js';
import { InvocationId, idempotentInvocationId, objectPartitionKey, randomPartitionKey, scopePartitionKey, workflowInvocationId } from '../common/ids.js';
import type { HandlerSchema, ServiceSchema } from './types.js';

/** Everything decided about a new invocation from the schema before its Invoke is appended. */
export interface ResolvedTarget {
  id: InvocationId;
  service_type: string;
  handler_type: string;
  completion_retention_ms: number;
  journal_retention_ms: number;
  /** A workflow's run handler: one invocation per key. */
  workflow_run: boolean;
  /** The id is derived from the request (workflow run, idempotency key): it may exist already. */
  deterministic: boolean;
}

/**
 * Id and retention of an invocation of `service/handler` (with `key` for objects and
 * workflows). Workflow runs and idempotent requests get deterministic ids, so a repeat finds
 * the invocation that already exists. A scoped invocation lives on its scope's partition, and
 * its object or workflow key is the scope's.
 */
export function resolveTarget(
  config: Config,
  service: ServiceSchema,
  handler: HandlerSchema,
  key: string,
  idempotencyKey: string | undefined,
  scope?: string,
  /** Where a plain service's invocation may start: a random partition key (a partition this node leads, in a cluster). */
  anyKey: () => bigint = randomPartitionKey,
): ResolvedTarget {
  const handler_type = service.ty === 'Service' ? '' : handler.ty ?? (service.ty === 'Workflow' ? 'Workflow' : 'Exclusive');
  const workflow_run = service.ty === 'Workflow' && handler_type === 'Workflow';
  let journal = handler.journal_retention_ms ?? service.journal_retention_ms ?? config.default_journal_retention_ms;
  // Registration clamps already (RT0022); this holds for services registered before the bound was lowered.
  if (config.max_journal_retention_ms !== undefined) journal = Math.min(journal, config.max_journal_retention_ms);
  let completion = journal;
  let id: InvocationId;
  if (workflow_run) {
    id = workflowInvocationId(service.name, key, scope);
    completion = handler.workflow_completion_retention_ms ?? config.default_workflow_completion_retention_ms;
  } else if (idempotencyKey) {
    id = idempotentInvocationId(service.name, key, handler.name, idempotencyKey, scope);
    completion = handler.idempotency_retention_ms ?? service.idempotency_retention_ms ?? config.default_idempotency_retention_ms;
  } else {
    const pk = scope !== undefined ? scopePartitionKey(scope) : service.ty === 'Service' ? anyKey() : objectPartitionKey(service.name, key);
    id = InvocationId.random(pk);
  }
  return {
    id,
    service_type: service.ty,
    handler_type,
    completion_retention_ms: completion,
    journal_retention_ms: Math.min(journal, completion),
    workflow_run,
    deterministic: workflow_run || Boolean(idempotencyKey),
  };
}
