// Discovery client: GET <uri>/discover, manifest v1–v4, transport HTTP/2 (prior knowledge) or HTTP/1.1.

import { KeelError } from '../errors/index.js';
import { MANIFEST_ACCEPT, MAX_SERVICE_PROTOCOL_VERSION, MIN_SERVICE_PROTOCOL_VERSION, overlapsSupported } from '../protocol/versions.js';
import { FetchError, fetchHttp1, fetchHttp2, fetchLambda, type FetchRequest, type FetchResponse } from '../endpoint/fetch.js';
import type { RequestSigner } from '../endpoint/identity.js';
import { parseLambdaArn } from '../endpoint/lambda.js';
import type {
  DiscoveredEndpoint,
  DiscoveredService,
  HandlerSchema,
  HandlerType,
  ProtocolType,
  RetryPolicyOverride,
  ServiceType,
} from './types.js';

export const DISCOVERY_TIMEOUT_MS = 10_000;

const SERVICE_NAME = /^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9._-]*$/;
const HANDLER_NAME = /^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*$/;

export interface DiscoveryTarget {
  /** HTTP base URI; for a function-platform deployment the ARN (same as `arn`). */
  uri: string;
  /** Function-platform deployment: discovery goes through Lambda Invoke. */
  arn?: string;
  assume_role_arn?: string;
  additional_headers?: Record<string, string>;
  use_http_11?: boolean;
}

export type TransportName = 'HTTP/2.0' | 'HTTP/1.1' | 'Lambda';

/** The highest `limits.invocations` taken (as an operator's limit: a u32). */
const MAX_INVOCATION_LIMIT = 4_294_967_295;
/** A manifest is a few kilobytes; anything near this is not one. */
const MAX_MANIFEST_BYTES = 16 * 1024 * 1024;

/** What to check, in the message itself: the CLI shows only the message. */
const UNREACHABLE_REMEDY =
  'Check that the deployment runs at this address, that Keel can reach it, and the credentials in additional_headers ' +
  '(an endpoint with identityKeys must list the publickeyv1_… that Keel logs at startup)';

/** The endpoint did not answer, or answered with an error: a bad gateway, not a server fault. */
function unreachable(where: URL | string, why: string, cause?: unknown): KeelError {
  return new KeelError('META0003', `error when calling '${where.toString()}': ${why}. ${UNREACHABLE_REMEDY}`, { cause });
}

/** The endpoint layer's failure, as the discovery error a user sees. */
function discoveryError(err: unknown, where: string): KeelError {
  if (!(err instanceof FetchError)) return unreachable(where, (err as Error)?.message ?? String(err), err);
  switch (err.failure) {
    case 'http1-only':
      return new KeelError(
        'META0014',
        `error when calling '${where}' over HTTP/2: ${err.message}. The endpoint may only speak HTTP/1.1: ` +
          `register it with "use_http_11": true (restate CLI: --use-http1.1)`,
        { cause: err },
      );
    case 'invalid-request':
      return new KeelError('KEEL0002', `the discovery request to '${where}' cannot be sent: ${err.message} (check additional_headers)`, { cause: err });
    case 'too-large':
      return new KeelError('META0013', `bad discovery response from '${where}': ${err.message}`, { cause: err });
    case 'function-error':
      return new KeelError('META0003', `error when invoking '${where}' for discovery: ${err.message}. ${UNREACHABLE_REMEDY}`, { cause: err });
    case 'unreachable':
      return unreachable(where, err.message, err);
  }
}

/** Normalises a deployment URI the way the CLI does (`http://h:1` → `http://h:1/`, path kept). */
export function normaliseUri(uri: string): string {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new KeelError('KEEL0007', `invalid deployment uri '${uri}'`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new KeelError('KEEL0007', `invalid deployment uri '${uri}': the scheme must be http or https`);
  }
  url.hash = '';
  return url.toString();
}

export function discoverUrl(uri: string): URL {
  const url = new URL(normaliseUri(uri));
  url.pathname = url.pathname.replace(/\/+$/, '') + '/discover';
  return url;
}

export interface DiscoverOptions {
  /** Keel's own listeners (`name`: ingress, admin, pgsql; `address`: host:port as bound): never a deployment. */
  own?: ReadonlyArray<{ name: string; address: string }>;
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** Signs the discovery request (request identity v1). */
  signer?: RequestSigner;
}

/** Runs discovery against one endpoint and returns its validated metadata. */
export async function discover(target: DiscoveryTarget, opts: DiscoverOptions = {}): Promise<DiscoveredEndpoint> {
  const headers: Record<string, string> = { ...(target.additional_headers ?? {}), accept: MANIFEST_ACCEPT };
  const request: FetchRequest = {
    method: 'GET',
    headers,
    timeout_ms: opts.timeoutMs ?? DISCOVERY_TIMEOUT_MS,
    max_body_bytes: MAX_MANIFEST_BYTES,
    ...(opts.connectTimeoutMs !== undefined ? { connect_timeout_ms: opts.connectTimeoutMs } : {}),
    ...(opts.signer !== undefined ? { signer: opts.signer } : {}),
  };
  let where: string;
  let transport: TransportName;
  let res: FetchResponse;
  try {
    if (target.arn !== undefined) {
      const arn = parseLambdaArn(target.arn).arn;
      [where, transport] = [arn, 'Lambda'];
      res = await fetchLambda(arn, target.assume_role_arn, '/discover', request);
    } else {
      const url = discoverUrl(target.uri);
      refuseOwnAddress(url, opts.own ?? []);
      [where, transport] = [url.toString(), target.use_http_11 ? 'HTTP/1.1' : 'HTTP/2.0'];
      res = await (target.use_http_11 ? fetchHttp1(url, request) : fetchHttp2(url, request));
    }
  } catch (err) {
    if (err instanceof KeelError) throw err;
    throw discoveryError(err, target.arn !== undefined ? target.arn : discoverUrl(target.uri).toString());
  }
  return readManifest(res, where, transport);
}

const LOCAL_HOSTS = new Set(['localhost', '0.0.0.0', '[::]', '[::1]', '::1']);

/**
 * A URI that is one of Keel's own listeners is the caller's mistake (registering the admin port,
 * say): refused with what it is, before Keel talks to itself and gets a protocol error back.
 */
function refuseOwnAddress(url: URL, own: ReadonlyArray<{ name: string; address: string }>): void {
  const port = url.port !== '' ? url.port : url.protocol === 'https:' ? '443' : '80';
  const host = url.hostname.toLowerCase();
  const local = LOCAL_HOSTS.has(host) || /^127\.\d+\.\d+\.\d+$/.test(host);
  for (const { name, address } of own) {
    const cut = address.lastIndexOf(':');
    const [boundHost, boundPort] = [address.slice(0, cut).toLowerCase(), address.slice(cut + 1)];
    if (boundPort !== port) continue;
    if (local || host === boundHost || (boundHost === '0.0.0.0' && host === '0.0.0.0')) {
      throw new KeelError('KEEL0007', `invalid deployment uri '${url.origin}': it is Keel's own ${name} address (${address}); register the address your service endpoint listens on`);
    }
  }
}

function readManifest(res: FetchResponse, where: string, transport: TransportName): DiscoveredEndpoint {
  if (res.status < 200 || res.status >= 300) {
    const text = res.body.toString('utf8').slice(0, 200).trim();
    throw unreachable(where, `the endpoint answered with status ${res.status}${text ? `: ${text}` : ''}`);
  }
  const contentType = (res.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  const m = /^application\/vnd\.restate\.endpointmanifest\.v(\d+)\+json$/.exec(contentType);
  if (!m || Number(m[1]) < 1 || Number(m[1]) > 4) {
    throw new KeelError(
      'META0013',
      `bad discovery response from '${where}': unsupported content-type '${contentType || '(none)'}'; ` +
        `expected one of ${MANIFEST_ACCEPT}`,
    );
  }
  let manifest: unknown;
  try {
    manifest = JSON.parse(res.body.toString('utf8'));
  } catch (err) {
    throw new KeelError('META0013', `bad discovery response from '${where}': manifest is not JSON: ${(err as Error).message}`);
  }
  const sdk = res.headers['x-restate-server'];
  return parseManifest(manifest, { url: where, transport, sdk_version: sdk || undefined });
}

function bad(where: string, why: string): KeelError {
  return new KeelError('META0013', `bad discovery response from '${where}': ${why}`);
}

const SERVICE_TY: Record<string, ServiceType> = { SERVICE: 'Service', VIRTUAL_OBJECT: 'VirtualObject', WORKFLOW: 'Workflow' };
const HANDLER_TY: Record<string, HandlerType> = { EXCLUSIVE: 'Exclusive', SHARED: 'Shared', WORKFLOW: 'Workflow' };

function isObj(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Validates a manifest and maps it to Keel's schema shapes. */
export function parseManifest(
  manifest: unknown,
  ctx: { url: string; transport: TransportName; sdk_version?: string | undefined },
): DiscoveredEndpoint {
  const where = ctx.url;
  if (!isObj(manifest)) throw bad(where, 'manifest is not a JSON object');
  const minV = manifest.minProtocolVersion;
  const maxV = manifest.maxProtocolVersion;
  if (!Number.isInteger(minV) || !Number.isInteger(maxV) || (minV as number) < 1 || (maxV as number) < (minV as number)) {
    throw bad(where, 'minProtocolVersion/maxProtocolVersion missing or invalid');
  }
  if (!overlapsSupported(minV as number, maxV as number)) {
    throw new KeelError(
      'META0012',
      `the endpoint at '${where}' supports service protocol versions [${minV}, ${maxV}], ` +
        `which do not overlap the versions this server supports [${MIN_SERVICE_PROTOCOL_VERSION}, ${MAX_SERVICE_PROTOCOL_VERSION}]`,
    );
  }
  let protocol_type: ProtocolType;
  const mode = manifest.protocolMode;
  if (mode === undefined) protocol_type = ctx.transport === 'HTTP/2.0' ? 'BidiStream' : 'RequestResponse';
  else if (mode === 'BIDI_STREAM') protocol_type = 'BidiStream';
  else if (mode === 'REQUEST_RESPONSE') protocol_type = 'RequestResponse';
  else throw bad(where, `unknown protocolMode ${JSON.stringify(mode)}`);
  if (protocol_type === 'BidiStream' && ctx.transport !== 'HTTP/2.0') {
    const over = ctx.transport === 'Lambda' ? 'a function platform (Lambda)' : 'HTTP/1.1';
    throw new KeelError(
      'META0015',
      `the endpoint at '${where}' announced BIDI_STREAM protocol mode, but it is reached over ${over}, which cannot carry it; ` +
        `configure the endpoint to announce REQUEST_RESPONSE`,
    );
  }
  if (!Array.isArray(manifest.services)) throw bad(where, 'manifest has no services array');
  const seen = new Set<string>();
  const services = manifest.services.map((s, i) => {
    const svc = parseService(s, `${where} services[${i}]`);
    if (seen.has(svc.name)) throw bad(where, `service '${svc.name}' appears twice`);
    seen.add(svc.name);
    return svc;
  });
  const invocation_limit = invocationLimit(manifest.limits, where);
  return {
    protocol_type,
    min_protocol_version: minV as number,
    max_protocol_version: maxV as number,
    ...(ctx.sdk_version ? { sdk_version: ctx.sdk_version } : {}),
    ...(invocation_limit !== undefined ? { invocation_limit } : {}),
    services,
  };
}

/**
 * The deployment's `limits.invocations`: the most invocations it runs at once, 0 or absent for
 * no limit. Restate 1.7 stores this field (kept for 1.8, where the manifest was to carry it) and
 * enforces nothing; no SDK sends it yet. Keel enforces it.
 */
function invocationLimit(limits: unknown, where: string): number | undefined {
  if (limits === undefined || limits === null) return undefined;
  if (typeof limits !== 'object' || Array.isArray(limits)) throw bad(where, 'limits must be an object');
  const n = (limits as Record<string, unknown>).invocations;
  if (n === undefined || n === null || n === 0) return undefined;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > MAX_INVOCATION_LIMIT) {
    throw bad(where, `limits.invocations must be an integer from 0 (no limit) to ${MAX_INVOCATION_LIMIT}: got ${JSON.stringify(n)?.slice(0, 40)}`);
  }
  return n;
}

function optMs(o: Record<string, unknown>, key: string, where: string): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw bad(where, `${key} must be a non-negative number of milliseconds`);
  return Math.round(v);
}

function optBool(o: Record<string, unknown>, key: string, where: string): boolean | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw bad(where, `${key} must be a boolean`);
  return v;
}

function optString(o: Record<string, unknown>, key: string, where: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw bad(where, `${key} must be a string`);
  return v;
}

function optMetadata(o: Record<string, unknown>, where: string): Record<string, string> | undefined {
  const v = o.metadata;
  if (v === undefined || v === null) return undefined;
  if (!isObj(v) || Object.values(v).some((x) => typeof x !== 'string')) throw bad(where, 'metadata must map strings to strings');
  return { ...(v as Record<string, string>) };
}

function retryPolicy(o: Record<string, unknown>, where: string): RetryPolicyOverride | undefined {
  const out: RetryPolicyOverride = {};
  const initial = optMs(o, 'retryPolicyInitialInterval', where);
  const max = optMs(o, 'retryPolicyMaxInterval', where);
  if (initial !== undefined) out.initial_interval_ms = initial;
  if (max !== undefined) out.max_interval_ms = max;
  const attempts = o.retryPolicyMaxAttempts;
  if (attempts !== undefined && attempts !== null) {
    if (!Number.isInteger(attempts) || (attempts as number) < 1) throw bad(where, 'retryPolicyMaxAttempts must be a positive integer');
    out.max_attempts = attempts as number;
  }
  const factor = o.retryPolicyExponentiationFactor;
  if (factor !== undefined && factor !== null) {
    if (typeof factor !== 'number' || !Number.isFinite(factor) || factor <= 0) throw bad(where, 'retryPolicyExponentiationFactor must be a positive number');
    out.exponentiation_factor = factor;
  }
  const onMax = o.retryPolicyOnMaxAttempts;
  if (onMax !== undefined && onMax !== null) {
    if (onMax !== 'PAUSE' && onMax !== 'KILL') throw bad(where, 'retryPolicyOnMaxAttempts must be PAUSE or KILL');
    out.on_max_attempts = onMax === 'PAUSE' ? 'pause' : 'kill';
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

function assign<T extends object, K extends keyof T>(target: T, key: K, value: T[K] | undefined): void {
  if (value !== undefined) target[key] = value;
}

function parseService(s: unknown, where: string): DiscoveredService {
  if (!isObj(s)) throw bad(where, 'service entry is not an object');
  const name = s.name;
  if (typeof name !== 'string' || !SERVICE_NAME.test(name)) throw bad(where, `invalid service name ${JSON.stringify(name)}`);
  const ty = typeof s.ty === 'string' ? SERVICE_TY[s.ty] : undefined;
  if (!ty) throw bad(where, `service '${name}' has an invalid ty ${JSON.stringify(s.ty)}`);
  if (!Array.isArray(s.handlers)) throw bad(where, `service '${name}' has no handlers array`);
  const ingressPrivate = optBool(s, 'ingressPrivate', where) ?? false;
  const seen = new Set<string>();
  const handlers = s.handlers.map((h, i) => {
    const handler = parseHandler(h, ty, ingressPrivate, `${where} (${name}) handlers[${i}]`);
    if (seen.has(handler.name)) throw bad(where, `handler '${name}/${handler.name}' appears twice`);
    seen.add(handler.name);
    return handler;
  });
  if (ty === 'Workflow' && handlers.filter((h) => h.ty === 'Workflow').length !== 1) {
    throw bad(where, `workflow '${name}' must have exactly one handler of type WORKFLOW`);
  }
  const svc: DiscoveredService = { name, ty, public: !ingressPrivate, handlers };
  assign(svc, 'inactivity_timeout_ms', optMs(s, 'inactivityTimeout', where));
  assign(svc, 'abort_timeout_ms', optMs(s, 'abortTimeout', where));
  assign(svc, 'journal_retention_ms', optMs(s, 'journalRetention', where));
  assign(svc, 'idempotency_retention_ms', optMs(s, 'idempotencyRetention', where));
  assign(svc, 'enable_lazy_state', optBool(s, 'enableLazyState', where));
  assign(svc, 'retry_policy', retryPolicy(s, where));
  assign(svc, 'documentation', optString(s, 'documentation', where));
  assign(svc, 'metadata', optMetadata(s, where));
  return svc;
}

function parseHandler(h: unknown, serviceTy: ServiceType, servicePrivate: boolean, where: string): HandlerSchema {
  if (!isObj(h)) throw bad(where, 'handler entry is not an object');
  const name = h.name;
  if (typeof name !== 'string' || !HANDLER_NAME.test(name)) throw bad(where, `invalid handler name ${JSON.stringify(name)}`);
  let ty: HandlerType | undefined;
  if (h.ty !== undefined && h.ty !== null) {
    ty = typeof h.ty === 'string' ? HANDLER_TY[h.ty] : undefined;
    if (!ty) throw bad(where, `handler '${name}' has an invalid ty ${JSON.stringify(h.ty)}`);
  }
  // As Restate maps them: a plain service's handler may say SHARED (the Java SDK does) and has
  // no type; a workflow handler without a type is SHARED.
  if (serviceTy === 'Service') {
    if (ty !== undefined && ty !== 'Shared') throw bad(where, `handler '${name}' of a plain service can only be SHARED or have no ty, not ${JSON.stringify(h.ty)}`);
    ty = undefined;
  } else if (serviceTy === 'VirtualObject') {
    ty ??= 'Exclusive';
    if (ty === 'Workflow') throw bad(where, `handler '${name}' of a virtual object cannot be of type WORKFLOW`);
  } else {
    ty ??= 'Shared';
    if (ty === 'Exclusive') throw bad(where, `handler '${name}' of a workflow cannot be EXCLUSIVE`);
  }
  let input_content_type: string | undefined = '*/*';
  let input_required = false;
  if (h.input !== undefined && h.input !== null) {
    if (!isObj(h.input)) throw bad(where, `handler '${name}' input must be an object`);
    input_content_type = optString(h.input, 'contentType', where);
    input_required = optBool(h.input, 'required', where) ?? false;
  }
  let output_content_type: string | undefined = 'application/json';
  let output_set_content_type_if_empty = false;
  if (h.output !== undefined && h.output !== null) {
    if (!isObj(h.output)) throw bad(where, `handler '${name}' output must be an object`);
    output_content_type = optString(h.output, 'contentType', where);
    output_set_content_type_if_empty = optBool(h.output, 'setContentTypeIfEmpty', where) ?? false;
  }
  const isPrivate = optBool(h, 'ingressPrivate', where) ?? servicePrivate;
  const out: HandlerSchema = { name, input_required, output_set_content_type_if_empty, public: !isPrivate };
  assign(out, 'ty', ty);
  assign(out, 'input_content_type', input_content_type);
  assign(out, 'output_content_type', output_content_type);
  assign(out, 'inactivity_timeout_ms', optMs(h, 'inactivityTimeout', where));
  assign(out, 'abort_timeout_ms', optMs(h, 'abortTimeout', where));
  assign(out, 'journal_retention_ms', optMs(h, 'journalRetention', where));
  assign(out, 'idempotency_retention_ms', optMs(h, 'idempotencyRetention', where));
  assign(out, 'workflow_completion_retention_ms', optMs(h, 'workflowCompletionRetention', where));
  assign(out, 'enable_lazy_state', optBool(h, 'enableLazyState', where));
  assign(out, 'retry_policy', retryPolicy(h, where));
  assign(out, 'documentation', optString(h, 'documentation', where));
  assign(out, 'metadata', optMetadata(h, where));
  return out;
}
