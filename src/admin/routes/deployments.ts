import type { FastifyInstance } from 'fastify';
import { isDeploymentId } from '../../common/ids.js';
import { KeelError, keelError } from '../../errors/index.js';
import type { RegisterRequest, UpdateRequest } from '../../metadata/types.js';
import type { AdminContext } from '../context.js';
import { deploymentDetailView, deploymentListView, registerView } from '../views.js';
import { DEFAULT_REPLAY_SAMPLE, MAX_REPLAY_SAMPLE, replayCheck, replayRefusal } from '../replay-check.js';
import { headerMap, idParam, nullableBoolean, nullableString, stringMap } from './schemas.js';

interface RegisterBody {
  uri?: string | null;
  arn?: string | null;
  assume_role_arn?: string | null;
  additional_headers?: Record<string, string> | null;
  metadata?: Record<string, string> | null;
  use_http_11?: boolean | null;
  force?: boolean | null;
  dry_run?: boolean | null;
  breaking?: boolean | null;
  overwrite?: boolean | null;
  /** Keel's own: replay suspended invocations against the endpoint first (admin/replay-check.ts). */
  replay_check?: { sample?: number | 'all' | null; refuse_on_mismatch?: boolean | null } | null;
}

const registerBody = {
  type: 'object',
  properties: {
    uri: nullableString,
    arn: nullableString,
    assume_role_arn: nullableString,
    additional_headers: headerMap,
    metadata: stringMap,
    use_http_11: nullableBoolean,
    force: nullableBoolean,
    dry_run: nullableBoolean,
    breaking: nullableBoolean,
    overwrite: nullableBoolean,
  },
} as const;

/** How many suspended invocations a replay check replays: 1 to MAX_REPLAY_SAMPLE, or "all" (as many, at most). */
const sampleSchema = { anyOf: [{ type: 'integer', minimum: 1, maximum: MAX_REPLAY_SAMPLE }, { type: 'string', enum: ['all'] }, { type: 'null' }] } as const;
const sampleOf = (sample: number | 'all' | null | undefined): number => (sample === 'all' ? MAX_REPLAY_SAMPLE : (sample ?? DEFAULT_REPLAY_SAMPLE));

/** POST /deployments: what PUT/PATCH take, and Keel's replay check. */
const postBody = {
  type: 'object',
  properties: {
    ...registerBody.properties,
    replay_check: {
      type: ['object', 'null'],
      properties: { sample: sampleSchema, refuse_on_mismatch: nullableBoolean },
      additionalProperties: false,
    },
  },
} as const;

/** POST /deployments/replay-check: a registration body and how many suspended invocations to replay. */
const replayCheckBody = {
  type: 'object',
  properties: { ...registerBody.properties, sample: sampleSchema },
} as const;

/** RFC 9110 field names: a token. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** A field value is one line: visible characters, spaces and tabs (obs-text allowed), no CR, LF or NUL. */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/**
 * Headers Keel sets itself or that HTTP/2 forbids: sent, they would break every request to the
 * endpoint (or replace its request identity), so they are refused at registration.
 */
const RESERVED_HEADERS = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'content-length',
  'x-restate-signature-scheme', 'x-restate-jwt-v1',
]);

/** additional_headers are sent with every request to the endpoint: each must be a header HTTP/1.1 and HTTP/2 can carry. */
function checkHeaders(headers: Record<string, string> | null | undefined): void {
  for (const [name, value] of Object.entries(headers ?? {})) {
    const field = `additional_headers.${JSON.stringify(name).slice(1, -1)}`;
    if (!HEADER_NAME.test(name)) throw new KeelError('KEEL0002', `the field ${field} is not a valid header name (letters, digits and !#$%&'*+.^_\`|~-)`);
    if (RESERVED_HEADERS.has(name.toLowerCase())) throw new KeelError('KEEL0002', `the field ${field} names a header Keel sets itself or that HTTP/2 forbids`);
    if (!HEADER_VALUE.test(value)) throw new KeelError('KEEL0002', `the field ${field} must be a single-line header value: no CR, LF, NUL or other control characters`);
  }
}

function checkDeploymentId(id: string): void {
  if (!isDeploymentId(id)) throw keelError('KEEL0003', { what: 'deployment', value: id });
}

/** Present flags of the body, without nulls. */
function flags<K extends keyof RegisterBody>(b: RegisterBody, keys: readonly K[]): Partial<Record<K, boolean>> {
  const out: Partial<Record<K, boolean>> = {};
  for (const k of keys) if (typeof b[k] === 'boolean') out[k] = b[k] as boolean;
  return out;
}

function registerRequest(b: RegisterBody): RegisterRequest {
  const hasArn = b.arn !== undefined && b.arn !== null;
  const hasUri = b.uri !== undefined && b.uri !== null;
  if (hasArn && hasUri) throw new KeelError('KEEL0007', 'give either uri or arn, not both');
  if (!hasArn && !hasUri) throw new KeelError('KEEL0007', 'the field uri (or arn) is required and must be a string');
  const request: RegisterRequest = hasArn ? { arn: b.arn! } : { uri: b.uri! };
  if (hasArn && b.assume_role_arn !== undefined && b.assume_role_arn !== null) request.assume_role_arn = b.assume_role_arn;
  if (b.additional_headers !== undefined) request.additional_headers = b.additional_headers;
  if (b.metadata !== undefined) request.metadata = b.metadata;
  return { ...request, ...flags(b, ['use_http_11', 'force', 'dry_run', 'breaking'] as const) };
}

function updateRequest(b: RegisterBody): UpdateRequest {
  const request: UpdateRequest = {};
  if (b.uri !== undefined && b.uri !== null) request.uri = b.uri;
  if (b.arn !== undefined && b.arn !== null) request.arn = b.arn;
  if (b.assume_role_arn !== undefined) request.assume_role_arn = b.assume_role_arn;
  if (b.additional_headers !== undefined) request.additional_headers = b.additional_headers;
  return { ...request, ...flags(b, ['use_http_11', 'dry_run', 'overwrite'] as const) };
}

/** `/deployments`: register (discovery), list, describe, update in place, remove. */
export function deploymentRoutes(ctx: AdminContext) {
  const { registry, config } = ctx;
  return async (r: FastifyInstance) => {
    r.post<{ Body: RegisterBody | undefined }>('/deployments', { schema: { body: postBody } }, async (req, reply) => {
      checkHeaders(req.body?.additional_headers);
      const request = registerRequest(req.body ?? {});
      const check = req.body?.replay_check;
      const replay = check ? await replayCheck(ctx, request, sampleOf(check.sample)) : undefined;
      if (replay !== undefined && !replay.passed && check?.refuse_on_mismatch === true) throw replayRefusal(replay);
      const { created, deployment } = await registry.register(request);
      return reply
        .status(created ? 201 : 200)
        .header('location', `deployments/${deployment.id}`)
        .send({ ...registerView(deployment, config), ...(replay !== undefined ? { replay_check: replay } : {}) });
    });

    r.post<{ Body: (RegisterBody & { sample?: number | 'all' | null }) | undefined }>('/deployments/replay-check', { schema: { body: replayCheckBody } }, async (req) => {
      checkHeaders(req.body?.additional_headers);
      return replayCheck(ctx, registerRequest(req.body ?? {}), sampleOf(req.body?.sample));
    });

    r.get('/deployments', async () => ({ deployments: registry.deployments().map(deploymentListView) }));

    r.get<{ Params: { id: string } }>('/deployments/:id', { schema: { params: idParam('id') } }, async (req) => {
      const id = req.params.id;
      checkDeploymentId(id);
      const d = registry.deployment(id);
      if (!d) throw keelError('KEEL0004', { what: 'deployment', name: id });
      return deploymentDetailView(d, config);
    });

    const update = { schema: { params: idParam('id'), body: registerBody } };
    const updateHandler = async (req: { params: { id: string }; body: RegisterBody | undefined }) => {
      checkDeploymentId(req.params.id);
      checkHeaders(req.body?.additional_headers);
      return registerView(await registry.updateInPlace(req.params.id, updateRequest(req.body ?? {})), config);
    };
    r.put<{ Params: { id: string }; Body: RegisterBody | undefined }>('/deployments/:id', update, updateHandler);
    r.patch<{ Params: { id: string }; Body: RegisterBody | undefined }>('/deployments/:id', update, updateHandler);

    r.delete<{ Params: { id: string }; Querystring: { force?: 'true' | 'false' } }>(
      '/deployments/:id',
      { schema: { params: idParam('id'), querystring: { type: 'object', properties: { force: { type: 'string', enum: ['true', 'false'] } } } } },
      async (req, reply) => {
        const id = req.params.id;
        checkDeploymentId(id);
        if (!registry.deployment(id)) throw keelError('KEEL0004', { what: 'deployment', name: id });
        // Restate answers 501 without force; Keel removes a drained deployment and says what keeps one in use.
        if (req.query.force !== 'true') await checkDrained(ctx, id);
        await registry.remove(id);
        return reply.status(202).send();
      },
    );
  };
}

/** A deployment may go without force once no service's latest revision and no unfinished invocation needs it. */
async function checkDrained(ctx: AdminContext, id: string): Promise<void> {
  const active = ctx.registry.services().filter((s) => s.deployment_id === id).map((s) => s.name);
  if (active.length > 0) {
    throw new KeelError('KEEL0016', `deployment ${id} still serves the latest revision of ${active.join(', ')}; register a newer deployment first, or remove it with force=true`);
  }
  const pinned = await ctx.source().unfinishedPinnedTo(id);
  if (pinned > 0) {
    throw new KeelError('KEEL0016', `${pinned} invocation(s) that are not completed are pinned to deployment ${id}; let them finish, or remove it with force=true (they will fail)`);
  }
}
