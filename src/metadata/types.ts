// Schema types of the registry: deployments, services with revisions, handlers.

export type ServiceType = 'Service' | 'VirtualObject' | 'Workflow';
export type HandlerType = 'Exclusive' | 'Shared' | 'Workflow';
export type ProtocolType = 'BidiStream' | 'RequestResponse';

export interface RetryPolicyOverride {
  initial_interval_ms?: number;
  max_interval_ms?: number;
  max_attempts?: number;
  exponentiation_factor?: number;
  on_max_attempts?: 'pause' | 'kill';
}

export interface HandlerSchema {
  name: string;
  ty?: HandlerType;
  input_content_type?: string;
  input_required: boolean;
  output_content_type?: string;
  output_set_content_type_if_empty: boolean;
  public: boolean;
  inactivity_timeout_ms?: number;
  abort_timeout_ms?: number;
  journal_retention_ms?: number;
  idempotency_retention_ms?: number;
  workflow_completion_retention_ms?: number;
  enable_lazy_state?: boolean;
  retry_policy?: RetryPolicyOverride;
  documentation?: string;
  metadata?: Record<string, string>;
}

/** A registration-time note on a service (RT0021, RT0022), shown as `info` by the admin API. */
export interface ServiceInfo {
  code: string;
  message: string;
}

export interface ServiceSchema {
  name: string;
  ty: ServiceType;
  revision: number;
  deployment_id: string;
  public: boolean;
  handlers: HandlerSchema[];
  inactivity_timeout_ms?: number;
  abort_timeout_ms?: number;
  journal_retention_ms?: number;
  idempotency_retention_ms?: number;
  enable_lazy_state?: boolean;
  retry_policy?: RetryPolicyOverride;
  documentation?: string;
  metadata?: Record<string, string>;
  /** Notes decided at registration: options ignored or clamped. */
  info?: ServiceInfo[];
  /**
   * Keel's own, set by PATCH /services/{name}: objects' state is cleared this long after its
   * last write (or access, with `state_ttl_on_access`). Kept by new revisions.
   */
  state_ttl_ms?: number;
  state_ttl_on_access?: boolean;
}

/**
 * What `PATCH /services/{name}` changes in a service's latest revision (Restate's
 * ModifyServiceRequest): only the fields given. A later registration of the service replaces
 * them with what its endpoint declares, as Restate's does.
 */
export interface ServiceChange {
  public?: boolean;
  idempotency_retention_ms?: number;
  workflow_completion_retention_ms?: number;
  journal_retention_ms?: number;
  inactivity_timeout_ms?: number;
  abort_timeout_ms?: number;
  /** Keel's own: the state TTL (0 removes it). */
  state_ttl_ms?: number;
  /** Keel's own: whether the state TTL counts from the last access (else from the last write). */
  state_ttl_on_access?: boolean;
}

export interface DeploymentSchema {
  id: string;
  /**
   * The destination: the HTTP base URI, or for a function-platform deployment its ARN
   * (then equal to `arn`). Unique across deployments.
   */
  uri: string;
  /** Function-platform (AWS Lambda) deployment: the qualified function ARN. Request-response only. */
  arn?: string;
  /** Role assumed (STS AssumeRole) to invoke the function. */
  assume_role_arn?: string;
  additional_headers: Record<string, string>;
  use_http_11: boolean;
  protocol_type: ProtocolType;
  min_protocol_version: number;
  max_protocol_version: number;
  sdk_version?: string;
  /**
   * The most attempts against this deployment at once, as its endpoint's manifest declares
   * (`limits.invocations`; absent or 0: none). Enforced by the invoker unless an operator's
   * limit (PUT /deployments/{id}/limits) replaces it.
   */
  invocation_limit?: number;
  /** Free-form metadata given at registration (`--metadata k=v`). */
  metadata?: Record<string, string>;
  created_at_ms: number;
  /** Services as discovered at this deployment, with the revision each got. */
  services: ServiceSchema[];
}

/** A service as discovery reports it, before the registry assigns a revision and deployment. */
export type DiscoveredService = Omit<ServiceSchema, 'revision' | 'deployment_id'>;

export interface DiscoveredEndpoint {
  protocol_type: ProtocolType;
  min_protocol_version: number;
  max_protocol_version: number;
  sdk_version?: string;
  /** The manifest's `limits.invocations`, when above 0. */
  invocation_limit?: number;
  services: DiscoveredService[];
}

export interface RegisterRequest {
  /** HTTP destination; ignored when `arn` is given. */
  uri?: string;
  arn?: string;
  assume_role_arn?: string | null;
  additional_headers?: Record<string, string> | null;
  use_http_11?: boolean;
  force?: boolean;
  dry_run?: boolean;
  breaking?: boolean;
  metadata?: Record<string, string> | null;
}

export interface UpdateRequest {
  uri?: string;
  arn?: string;
  assume_role_arn?: string | null;
  additional_headers?: Record<string, string> | null;
  use_http_11?: boolean;
  dry_run?: boolean;
  overwrite?: boolean;
}

/** A subscription: records of a Kafka topic delivered to a handler (by `src/subscriptions`). */
export interface SubscriptionSchema {
  /** `sub_1` + 22 base62 characters. */
  id: string;
  /** `kafka://<cluster>/<topic>` */
  source: string;
  /** `service://<service>/<handler>` */
  sink: string;
  /** Consumer properties; they take precedence over the cluster's. */
  options: Record<string, string>;
  created_at_ms: number;
}

export interface SubscriptionRequest {
  source?: unknown;
  sink?: unknown;
  options?: unknown;
}
