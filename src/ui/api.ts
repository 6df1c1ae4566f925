// The admin API, as the UI uses it: the same public routes the `restate` CLI calls, on the origin
// that served the UI. Errors carry the HTTP status and the stable code (`restate_code`).

export type Row = Record<string, unknown>;

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null,
  ) {
    super(message);
  }
}

export interface ApiResult<T> {
  status: number;
  data: T;
}

/** The admin token, when the server asks for one (admin.auth_token): kept for this tab only. */
const TOKEN_KEY = 'keel.admin_token';

function storedToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Asks for the token once the server answered 401 (KEEL0401); null when the user declines. */
function askToken(): string | null {
  const t = window.prompt('This Keel admin API requires a token (admin.auth_token). Token:')?.trim();
  if (!t) return null;
  sessionStorage.setItem(TOKEN_KEY, t);
  return t;
}

async function send(method: string, path: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  const token = storedToken();
  try {
    return await fetch(path, {
      method,
      headers: {
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(`cannot reach the admin API: ${(err as Error).message}`, 0, null);
  }
}

/** Any admin call; JSON in and out. Throws ApiError on a status ≥ 400 or a network failure. */
export async function api<T = unknown>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResult<T>> {
  const sentWith = storedToken();
  let res = await send(method, path, body, headers);
  // The server requires a token: ask (unless another call just got it), then try again with it.
  if (res.status === 401 && (storedToken() !== sentWith || askToken() !== null)) res = await send(method, path, body, headers);
  const text = await res.text();
  let data: unknown = undefined;
  if (text !== '') {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (res.status >= 400) {
    const o = (data ?? {}) as { message?: string; restate_code?: string | null };
    const message = typeof data === 'string' ? data : (o.message ?? `${method} ${path} answered ${res.status}`);
    throw new ApiError(message, res.status, o.restate_code ?? codeIn(message));
  }
  return { status: res.status, data: data as T };
}

/** The first stable code written as `[RT0016]` or `META0004:` in a message, if any. */
export function codeIn(message: string): string | null {
  return /\b(META|RT|KEEL)\d{4}\b/.exec(message)?.[0] ?? null;
}

/** SQL over the introspection tables (`POST /query`, JSON rows; null columns are left out). */
export async function sql(query: string): Promise<Row[]> {
  const r = await api<{ rows: Row[] }>('POST', '/query', { query }, { accept: 'application/json' });
  return r.data.rows;
}

/** A SQL string literal. */
export function lit(s: string): string {
  return `'${s.replace(/'/g, "''")}'`;
}

export interface CodeEntry {
  code: string;
  title: string;
  condition: string;
  remedy: string;
}

const explained = new Map<string, Promise<CodeEntry | null>>();

/** GET /errors/{code}, once per code; null for a code the catalogue does not know. */
export function explain(code: string): Promise<CodeEntry | null> {
  const key = code.toUpperCase();
  let p = explained.get(key);
  if (!p) {
    p = api<CodeEntry>('GET', `/errors/${encodeURIComponent(key)}`).then(
      (r) => r.data,
      (err) => {
        if (err instanceof ApiError && err.status === 404) return null;
        explained.delete(key);
        throw err;
      },
    );
    explained.set(key, p);
  }
  return p;
}

// ---- shapes of the admin API that the UI reads ----------------------------------------------

export interface RetryPolicy {
  initial_interval?: string;
  exponentiation_factor?: number;
  max_attempts?: number | null;
  max_interval?: string;
  on_max_attempts?: string;
}

export interface Handler {
  name: string;
  ty?: string;
  public?: boolean;
  input_description?: string;
  output_description?: string;
  documentation?: string;
  idempotency_retention?: string;
  workflow_completion_retention?: string;
  journal_retention?: string;
  inactivity_timeout?: string;
  abort_timeout?: string;
  enable_lazy_state?: boolean;
  retry_policy?: RetryPolicy;
  metadata?: Record<string, string>;
}

export interface Service {
  name: string;
  ty: string;
  handlers: Handler[];
  deployment_id: string;
  revision: number;
  public?: boolean;
  documentation?: string;
  idempotency_retention?: string;
  workflow_completion_retention?: string;
  journal_retention?: string;
  inactivity_timeout?: string;
  abort_timeout?: string;
  enable_lazy_state?: boolean;
  retry_policy?: RetryPolicy;
  info?: Array<{ code: string; message: string }>;
  /** Keel's own: the state TTL and what it counts from. */
  state_ttl?: string;
  state_ttl_from?: 'last_write' | 'last_access';
}

export interface Deployment {
  id: string;
  uri?: string;
  arn?: string;
  assume_role_arn?: string | null;
  protocol_type?: string;
  http_version?: string;
  created_at: string;
  min_protocol_version: number;
  max_protocol_version: number;
  sdk_version?: string;
  additional_headers?: Record<string, string>;
  services: Array<{ name: string; revision: number }>;
}

export interface RegisterResponse {
  id: string;
  services: Service[];
  min_protocol_version: number;
  max_protocol_version: number;
  sdk_version?: string;
}

/** A journal entry as the replay check names it. */
export interface EntryRef {
  index?: number;
  command?: number;
  type?: string;
  name?: string;
}

/** POST /deployments/replay-check: suspended invocations replayed against an endpoint. */
export interface ReplayReport {
  deployment: { uri: string; services: string[]; replaces?: string };
  suspended: number;
  checked: number;
  compatible: number;
  mismatched: number;
  failed: number;
  not_replayed: Record<string, number>;
  passed: boolean;
  invocations: Array<{
    id: string;
    target: string;
    verdict: 'compatible' | 'mismatch' | 'failed';
    ended?: string;
    error_code?: string;
    message?: string;
    next?: EntryRef;
    recorded?: EntryRef;
    new?: EntryRef;
  }>;
}

export interface Partition {
  id: number;
  health: string;
  key_range: { start: string; end: string };
  applied_log_position: number;
  queued_commands: number;
  writing: boolean;
  invocations: Record<string, number>;
  inboxed: number;
  timers: number;
  outbox: number;
}

export interface Subscription {
  id: string;
  source: string;
  sink: string;
  options: Record<string, string>;
}

/** `GET /subscriptions/{id}/status`: the consumer and, per topic partition, Keel's position and the lag. */
export interface SubscriptionStatus {
  id: string;
  state: 'starting' | 'consuming' | 'paused' | 'failed' | 'stopped';
  reason: string | null;
  consumer_group: string | null;
  pending_invocations: number;
  max_pending_invocations: number | null;
  last_warning: { code: string; message: string; at: string } | null;
  partitions: Array<{
    partition: number;
    position: number | null;
    high_watermark: number | null;
    lag: number | null;
    records_delivered: number;
    records_skipped: number;
    assigned: boolean;
    paused: boolean;
  }>;
}

export const INVOCATION_ACTIONS = ['cancel', 'kill', 'pause', 'resume', 'purge', 'restart-as-new'] as const;
export type InvocationAction = (typeof INVOCATION_ACTIONS)[number];

/** PATCH /invocations/{id}/{action}. */
export async function manage(id: string, action: InvocationAction): Promise<ApiResult<{ new_invocation_id?: string } | undefined>> {
  return api('PATCH', `/invocations/${encodeURIComponent(id)}/${action}`);
}
