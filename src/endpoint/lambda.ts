// Function-platform (AWS Lambda) deployments: ARN parsing, the Lambda client, and one
// request-response exchange carried in an API-Gateway-like event, as restate-server does it
// (crates/service-client/src/lambda.rs).
//
// The endpoint is the AWS one unless the environment says otherwise: the AWS SDK itself honours
// AWS_ENDPOINT_URL_LAMBDA / AWS_ENDPOINT_URL (that is how tests point it at a local emulator).

import type { LambdaClient } from '@aws-sdk/client-lambda';
import { loadPackage } from '../common/load-package.js';
import { KeelError, keelError } from '../errors/index.js';

export interface LambdaArn {
  arn: string;
  partition: string;
  region: string;
  account: string;
  function_name: string;
  qualifier: string;
}

const ARN = /^arn:(aws[a-zA-Z-]*):lambda:([a-z0-9-]+):(\d{12}):function:([a-zA-Z0-9_-]{1,140})(?::([a-zA-Z0-9$_-]+))?$/;

/** Parses a function ARN; it must carry a version or alias (a qualified ARN). 400 otherwise. */
export function parseLambdaArn(arn: unknown): LambdaArn {
  if (typeof arn !== 'string') throw keelError('KEEL0002', { field: 'arn', expected: 'a string' });
  const m = ARN.exec(arn.trim());
  if (!m) {
    throw new KeelError(
      'KEEL0007',
      `invalid Lambda ARN '${arn}': expected arn:<partition>:lambda:<region>:<account>:function:<name>:<version or alias>`,
    );
  }
  if (m[5] === undefined) {
    throw new KeelError(
      'KEEL0007',
      `invalid Lambda ARN '${arn}': A qualified ARN needs a version or alias suffix. If you want to use the unpublished version, ` +
        `provide $LATEST and make sure your shell doesn't expand it`,
    );
  }
  return { arn: m[0], partition: m[1]!, region: m[2]!, account: m[3]!, function_name: m[4]!, qualifier: m[5] };
}

/** One HTTP-like answer of the function: what the SDK's Lambda handler returned. */
export interface LambdaResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

export interface LambdaRequest {
  arn: string;
  assume_role_arn?: string | undefined;
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  timeoutMs?: number;
}

/** The function answered with FunctionError (it threw, or the runtime failed). */
export class LambdaFunctionError extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
    this.name = 'LambdaFunctionError';
  }
}

/** The AWS API refused the call (ResourceNotFoundException, TooManyRequestsException, ...). */
export class LambdaApiError extends Error {
  constructor(
    readonly errorName: string,
    readonly httpStatus: number | undefined,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'LambdaApiError';
  }
}

const clients = new Map<string, LambdaClient>();

function endpointOverridden(): boolean {
  return !!(process.env.AWS_ENDPOINT_URL_LAMBDA || process.env.AWS_ENDPOINT_URL_STS || process.env.AWS_ENDPOINT_URL);
}

function hasAwsCredentials(): boolean {
  return !!(
    (process.env.AWS_ACCESS_KEY_ID && process.env.AWS_SECRET_ACCESS_KEY) ||
    process.env.AWS_PROFILE ||
    process.env.AWS_WEB_IDENTITY_TOKEN_FILE ||
    process.env.AWS_CONTAINER_CREDENTIALS_FULL_URI ||
    process.env.AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
  );
}

type Credentials = { accessKeyId: string; secretAccessKey: string; sessionToken?: string; expiration?: Date };

/** The part of the AWS SDK's STS client that assuming a role uses (loaded on demand, untyped package path). */
interface StsModule {
  STSClient: new (config: { region: string; maxAttempts: number; credentials: unknown }) => {
    send(command: unknown): Promise<{ Credentials?: { AccessKeyId?: string; SecretAccessKey?: string; SessionToken?: string; Expiration?: Date } }>;
  };
  AssumeRoleCommand: new (input: { RoleArn: string; RoleSessionName: string }) => unknown;
}
interface CredentialProviderModule {
  defaultProvider(): unknown;
}

/** Credentials of an assumed role, refreshed a minute before they expire. */
function assumeRoleProvider(region: string, roleArn: string): () => Promise<Credentials> {
  let cached: Credentials | undefined;
  return async () => {
    if (cached && (!cached.expiration || cached.expiration.getTime() - Date.now() > 60_000)) return cached;
    // STS comes with the AWS SDK's credential chain (a dependency of @aws-sdk/client-lambda).
    // AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL redirect it like Lambda.
    const sts = await loadPackage<StsModule>('@aws-sdk/nested-clients/sts');
    const base = endpointOverridden() && !hasAwsCredentials()
      ? { accessKeyId: 'keel', secretAccessKey: 'keel' }
      : (await loadPackage<CredentialProviderModule>('@aws-sdk/credential-provider-node')).defaultProvider();
    const client = new sts.STSClient({ region, maxAttempts: 1, credentials: base });
    const out = await client.send(new sts.AssumeRoleCommand({ RoleArn: roleArn, RoleSessionName: 'keel' }));
    const c = out.Credentials;
    if (!c?.AccessKeyId || !c.SecretAccessKey) throw new Error(`AssumeRole ${roleArn} returned no credentials`);
    cached = { accessKeyId: c.AccessKeyId, secretAccessKey: c.SecretAccessKey, sessionToken: c.SessionToken, expiration: c.Expiration };
    return cached;
  };
}

/** The AWS SDK costs ~100 ms to load: only servers with function-platform deployments pay it. */
let lambdaSdk: Promise<typeof import('@aws-sdk/client-lambda')> | undefined;
const loadLambdaSdk = () => (lambdaSdk ??= loadPackage<typeof import('@aws-sdk/client-lambda')>('@aws-sdk/client-lambda'));

async function client(region: string, assumeRole: string | undefined): Promise<LambdaClient> {
  const key = `${region}|${assumeRole ?? ''}`;
  let c = clients.get(key);
  if (c) return c;
  const { LambdaClient } = await loadLambdaSdk();
  c = clients.get(key);
  if (c) return c;
  const credentials = assumeRole
    ? assumeRoleProvider(region, assumeRole)
    : endpointOverridden() && !hasAwsCredentials()
      ? { accessKeyId: 'keel', secretAccessKey: 'keel' }
      : undefined;
  // Retries are the invoker's business (its own retry policy): the SDK tries once.
  c = new LambdaClient({ region, maxAttempts: 1, ...(credentials ? { credentials } : {}) });
  clients.set(key, c);
  return c;
}

function textOf(payload: Uint8Array | undefined): string {
  return payload ? Buffer.from(payload).toString('utf8') : '';
}

/**
 * Invokes the function with the API-Gateway-like event the Restate SDK's Lambda handler reads,
 * and decodes its `{statusCode, headers, body, isBase64Encoded}` answer.
 * Throws LambdaFunctionError (the function failed) or LambdaApiError (the AWS call failed).
 */
export async function invokeLambda(req: LambdaRequest): Promise<LambdaResponse> {
  const { region } = parseLambdaArn(req.arn);
  const event = {
    path: req.path,
    httpMethod: req.method,
    headers: req.headers,
    body: req.body.toString('base64'),
    isBase64Encoded: true,
  };
  const abort = new AbortController();
  const timer = req.timeoutMs !== undefined ? setTimeout(() => abort.abort(), req.timeoutMs) : undefined;
  let out;
  try {
    const { InvokeCommand } = await loadLambdaSdk();
    out = await (await client(region, req.assume_role_arn)).send(
      new InvokeCommand({ FunctionName: req.arn, Payload: Buffer.from(JSON.stringify(event)) }),
      { abortSignal: abort.signal },
    );
  } catch (err) {
    const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
    const name = abort.signal.aborted ? 'TimeoutError' : (e?.name ?? 'Error');
    const why = abort.signal.aborted ? `no answer within ${req.timeoutMs} ms` : (e?.message ?? String(err));
    throw new LambdaApiError(name, e?.$metadata?.httpStatusCode, `${name}: ${why}`, { cause: err });
  } finally {
    clearTimeout(timer);
  }
  if (out.FunctionError) {
    let msg = textOf(out.Payload);
    try {
      const p = JSON.parse(msg) as { errorType?: string; errorMessage?: string };
      if (p.errorMessage !== undefined) msg = `${p.errorType ?? 'Error'}: ${p.errorMessage}`;
    } catch {
      /* keep the raw text */
    }
    throw new LambdaFunctionError(out.FunctionError, `function returned an error (${out.FunctionError}): ${msg.slice(0, 500)}`);
  }
  let payload: { statusCode?: unknown; headers?: unknown; body?: unknown; isBase64Encoded?: unknown };
  try {
    payload = JSON.parse(textOf(out.Payload));
  } catch (err) {
    throw new LambdaFunctionError('BadPayload', `the function's answer is not JSON: ${(err as Error).message}`);
  }
  if (payload === null || typeof payload !== 'object' || typeof payload.statusCode !== 'number') {
    throw new LambdaFunctionError('BadPayload', "the function's answer has no numeric statusCode");
  }
  const headers: Record<string, string> = {};
  if (payload.headers && typeof payload.headers === 'object') {
    for (const [k, v] of Object.entries(payload.headers as Record<string, unknown>)) {
      if (v !== undefined && v !== null) headers[k.toLowerCase()] = String(v);
    }
  }
  const rawBody = typeof payload.body === 'string' ? payload.body : '';
  const body = payload.isBase64Encoded === true ? Buffer.from(rawBody, 'base64') : Buffer.from(rawBody, 'utf8');
  return { status: payload.statusCode, headers, body };
}

export function closeLambdaClients(): void {
  for (const c of clients.values()) c.destroy();
  clients.clear();
}
