// JSON shapes of the admin API (Restate 1.7 compatible) built from the registry's schemas.

import type { Config } from '../config/index.js';
import { formatDuration } from '../common/units.js';
import type { DeploymentSchema, HandlerSchema, RetryPolicyOverride, ServiceSchema } from '../metadata/types.js';

function onMax(v: 'pause' | 'kill'): 'Pause' | 'Kill' {
  return v === 'pause' ? 'Pause' : 'Kill';
}

function retryOverride(r: RetryPolicyOverride): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (r.initial_interval_ms !== undefined) out.initial_interval = formatDuration(r.initial_interval_ms);
  if (r.exponentiation_factor !== undefined) out.exponentiation_factor = r.exponentiation_factor;
  out.max_attempts = r.max_attempts ?? null;
  if (r.max_interval_ms !== undefined) out.max_interval = formatDuration(r.max_interval_ms);
  if (r.on_max_attempts !== undefined) out.on_max_attempts = onMax(r.on_max_attempts);
  return out;
}

function describeInput(h: HandlerSchema): string {
  return h.input_content_type ?? 'none';
}

function describeOutput(h: HandlerSchema): string {
  return h.output_content_type ?? 'none';
}

export function handlerView(h: HandlerSchema): Record<string, unknown> {
  const out: Record<string, unknown> = { name: h.name };
  if (h.ty) out.ty = h.ty;
  out.public = h.public;
  out.input_description = describeInput(h);
  out.output_description = describeOutput(h);
  if (h.documentation !== undefined) out.documentation = h.documentation;
  if (h.metadata !== undefined) out.metadata = h.metadata;
  if (h.idempotency_retention_ms !== undefined) out.idempotency_retention = formatDuration(h.idempotency_retention_ms);
  if (h.workflow_completion_retention_ms !== undefined) out.workflow_completion_retention = formatDuration(h.workflow_completion_retention_ms);
  if (h.journal_retention_ms !== undefined) out.journal_retention = formatDuration(h.journal_retention_ms);
  if (h.inactivity_timeout_ms !== undefined) out.inactivity_timeout = formatDuration(h.inactivity_timeout_ms);
  if (h.abort_timeout_ms !== undefined) out.abort_timeout = formatDuration(h.abort_timeout_ms);
  if (h.enable_lazy_state !== undefined) out.enable_lazy_state = h.enable_lazy_state;
  out.retry_policy = retryOverride(h.retry_policy ?? {});
  return out;
}

/** ServiceMetadata of the admin API, with config defaults where the manifest set nothing. */
export function serviceView(s: ServiceSchema, config: Config): Record<string, unknown> {
  const d = config.default_retry_policy;
  const r = s.retry_policy ?? {};
  const out: Record<string, unknown> = {
    name: s.name,
    ty: s.ty,
    handlers: s.handlers.map(handlerView),
    deployment_id: s.deployment_id,
    revision: s.revision,
    public: s.public,
    idempotency_retention: formatDuration(s.idempotency_retention_ms ?? config.default_idempotency_retention_ms),
  };
  if (s.ty === 'Workflow') {
    const wf = s.handlers.find((h) => h.ty === 'Workflow');
    out.workflow_completion_retention = formatDuration(wf?.workflow_completion_retention_ms ?? config.default_workflow_completion_retention_ms);
  }
  Object.assign(out, {
    journal_retention: formatDuration(s.journal_retention_ms ?? config.default_journal_retention_ms),
    inactivity_timeout: formatDuration(s.inactivity_timeout_ms ?? config.worker.invoker.inactivity_timeout_ms),
    abort_timeout: formatDuration(s.abort_timeout_ms ?? config.worker.invoker.abort_timeout_ms),
    enable_lazy_state: s.enable_lazy_state ?? false,
    retry_policy: {
      initial_interval: formatDuration(r.initial_interval_ms ?? d.initial_interval_ms),
      exponentiation_factor: r.exponentiation_factor ?? d.exponentiation_factor,
      max_attempts: r.max_attempts ?? d.max_attempts ?? null,
      max_interval: formatDuration(r.max_interval_ms ?? d.max_interval_ms),
      on_max_attempts: onMax(r.on_max_attempts ?? d.on_max_attempts),
    },
  });
  if (s.documentation !== undefined) out.documentation = s.documentation;
  if (s.metadata !== undefined) out.metadata = s.metadata;
  if (s.info !== undefined && s.info.length > 0) out.info = s.info;
  // Keel's own (PATCH /services/{name}): the restate CLI ignores fields it does not know.
  if (s.state_ttl_ms !== undefined) {
    out.state_ttl = formatDuration(s.state_ttl_ms);
    out.state_ttl_from = s.state_ttl_on_access === false ? 'last_write' : 'last_access';
  }
  return out;
}

function deploymentBase(d: DeploymentSchema): Record<string, unknown> {
  // Restate's two variants: HTTP (uri, http_version) and Lambda (arn, assume_role_arn).
  const destination: Record<string, unknown> =
    d.arn !== undefined
      ? { arn: d.arn, assume_role_arn: d.assume_role_arn ?? null, protocol_type: 'RequestResponse' }
      : { uri: d.uri, protocol_type: d.protocol_type, http_version: d.use_http_11 ? 'HTTP/1.1' : 'HTTP/2.0' };
  const out: Record<string, unknown> = {
    id: d.id,
    ...destination,
    created_at: new Date(d.created_at_ms).toISOString(),
    min_protocol_version: d.min_protocol_version,
    max_protocol_version: d.max_protocol_version,
  };
  if (d.sdk_version !== undefined) out.sdk_version = d.sdk_version;
  if (Object.keys(d.additional_headers).length > 0) out.additional_headers = d.additional_headers;
  if (d.metadata !== undefined && Object.keys(d.metadata).length > 0) out.metadata = d.metadata;
  return out;
}

/** Element of GET /deployments. */
export function deploymentListView(d: DeploymentSchema): Record<string, unknown> {
  return { ...deploymentBase(d), services: d.services.map((s) => ({ name: s.name, revision: s.revision })) };
}

/** GET /deployments/{id}. */
export function deploymentDetailView(d: DeploymentSchema, config: Config): Record<string, unknown> {
  return { ...deploymentBase(d), services: d.services.map((s) => serviceView(s, config)) };
}

/** Answer of POST /deployments and of an update in place. */
export function registerView(d: DeploymentSchema, config: Config): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: d.id,
    services: d.services.map((s) => serviceView(s, config)),
    min_protocol_version: d.min_protocol_version,
    max_protocol_version: d.max_protocol_version,
  };
  if (d.sdk_version !== undefined) out.sdk_version = d.sdk_version;
  return out;
}
