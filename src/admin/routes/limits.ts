// The rule book of flow control, as Restate 1.7.12 serves it: `PUT /limits/rules` creates or
// replaces rules (a batch, all or none, each with an optional precondition) and
// `POST /limits/rules/bulk-delete` removes them; the CLI lists them with SQL (`sys_rules`).
// The book is cluster metadata (the registry); once a change is committed the partitions get it
// before the answer. Bodies are read as Restate's serde types read them, and refused with
// Restate's words and the path of the field (`[0].limits.concurrency`), under KEEL0910.

import type { FastifyInstance, FastifyReply } from 'fastify';
import { parsePattern, parseVqueueId, type DeleteRule, type LimitRule, type Precondition, type UpsertRule } from '../../common/limit-rules.js';
import { KeelError, keelError } from '../../errors/index.js';
import type { AdminContext } from '../context.js';

const MAX_U32 = 0xffff_ffff;

function invalid(path: string, why: string): KeelError {
  return new KeelError('KEEL0910', `Failed to deserialize the JSON body into the target type: ${path === '' ? '' : `${path}: `}${why}`);
}

/** A JSON value as serde names what it found (`integer \`0\``, `string "x"`, `map`). */
function unexpected(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'number') return Number.isInteger(v) ? `integer \`${BigInt(v)}\`` : `floating point \`${v}\``;
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  return Array.isArray(v) ? 'sequence' : 'map';
}

const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function map(v: unknown, path: string): Record<string, unknown> {
  if (!isMap(v)) throw invalid(path, `invalid type: ${unexpected(v)}, expected a map`);
  return v;
}

function sequence(body: unknown): unknown[] {
  if (body === undefined) throw keelError('KEEL0001', { why: 'it is empty: send a JSON array of rules' });
  if (!Array.isArray(body)) throw invalid('', `invalid type: ${unexpected(body)}, expected a sequence`);
  return body;
}

/** An unsigned 32-bit integer, at least `min`; serde's expectation named as it names it. */
function u32(v: unknown, path: string, min: 0 | 1): number {
  const expected = min === 1 ? 'a nonzero u32' : 'u32';
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalid(path, `invalid type: ${unexpected(v)}, expected ${expected}`);
  if (v < min || v > MAX_U32) throw invalid(path, `invalid value: ${unexpected(v)}, expected ${expected}`);
  return v;
}

function string(v: unknown, path: string): string {
  if (typeof v !== 'string') throw invalid(path, `invalid type: ${unexpected(v)}, expected a string`);
  return v;
}

/** The canonical pattern (components joined by `/`), or Restate's reason for refusing it. */
function pattern(v: unknown, path: string): string {
  const parsed = parsePattern(string(v, path));
  if ('error' in parsed) throw invalid(path, parsed.error);
  return parsed.join('/');
}

function precondition(v: unknown, path: string): Precondition {
  const m = map(v, path);
  if (!('type' in m)) throw invalid(path, 'missing field `type`');
  const type = m.type;
  if (typeof type !== 'string') throw invalid(`${path}.type`, `invalid type: ${unexpected(type)}, expected variant identifier`);
  switch (type) {
    case 'none':
      return { type: 'none' };
    case 'does_not_exist':
      return { type: 'does_not_exist' };
    case 'matches':
      if (m.version === undefined) throw invalid(path, 'missing field `version`');
      return { type: 'matches', version: u32(m.version, `${path}.version`, 0) };
    default:
      throw invalid(path, `unknown variant \`${type}\`, expected one of \`none\`, \`matches\`, \`does_not_exist\``);
  }
}

/** One rule of a PUT: only `pattern` is required; `null` is the same as leaving a field out; unknown fields are ignored. */
function upsert(v: unknown, at: string): UpsertRule {
  const m = map(v, at);
  let canonical: string | undefined;
  const rule: Omit<UpsertRule, 'pattern'> = {};
  for (const [key, x] of Object.entries(m)) {
    const path = `${at}.${key}`;
    if (key === 'pattern') canonical = pattern(x, path);
    if (x === null) continue;
    if (key === 'limits') rule.limits = limits(x, path);
    else if (key === 'description') rule.description = string(x, path);
    else if (key === 'disabled') {
      if (typeof x !== 'boolean') throw invalid(path, `invalid type: ${unexpected(x)}, expected a boolean`);
      rule.disabled = x;
    } else if (key === 'precondition') rule.precondition = precondition(x, path);
  }
  if (canonical === undefined) throw invalid(at, 'missing field `pattern`');
  return { pattern: canonical, ...rule };
}

/** `limits`: Restate's `concurrency`, and Keel's own `rate` ({starts, interval_ms}) and `backlog`. */
function limits(x: unknown, path: string): NonNullable<UpsertRule['limits']> {
  const m = map(x, path);
  const out: NonNullable<UpsertRule['limits']> = {};
  if (m.concurrency !== undefined && m.concurrency !== null) out.concurrency = u32(m.concurrency, `${path}.concurrency`, 1);
  // Keel's own fields: absent keeps the rule's, null removes them.
  if (m.rate === null) out.rate = null;
  else if (m.rate !== undefined) {
    const r = map(m.rate, `${path}.rate`);
    if (r.starts === undefined) throw invalid(`${path}.rate`, 'missing field `starts`');
    if (r.interval_ms === undefined) throw invalid(`${path}.rate`, 'missing field `interval_ms`');
    out.rate = { starts: u32(r.starts, `${path}.rate.starts`, 1), interval_ms: u32(r.interval_ms, `${path}.rate.interval_ms`, 1) };
  }
  if (m.backlog === null) out.backlog = null;
  else if (m.backlog !== undefined) out.backlog = u32(m.backlog, `${path}.backlog`, 0);
  return out;
}

function deletion(v: unknown, at: string): DeleteRule {
  const m = map(v, at);
  let canonical: string | undefined;
  let expected_version: number | undefined;
  for (const [key, x] of Object.entries(m)) {
    if (key === 'pattern') canonical = pattern(x, `${at}.pattern`);
    else if (key === 'expected_version' && x !== null) expected_version = u32(x, `${at}.expected_version`, 0);
  }
  if (canonical === undefined) throw invalid(at, 'missing field `pattern`');
  return expected_version === undefined ? { pattern: canonical } : { pattern: canonical, expected_version };
}

/** A rule as Restate answers it: `limits` `{}` when unlimited, no `description` when there is none. */
function ruleView(r: LimitRule) {
  return {
    pattern: r.pattern,
    limits: {
      ...(r.concurrency !== undefined ? { concurrency: r.concurrency } : {}),
      ...(r.rate !== undefined ? { rate: r.rate } : {}),
      ...(r.backlog !== undefined ? { backlog: r.backlog } : {}),
    },
    ...(r.description !== undefined ? { description: r.description } : {}),
    disabled: r.disabled,
    version: r.version,
    last_modified_millis_since_epoch: r.last_modified_ms,
  };
}

/** As Restate's router answers a method a route does not have: 405, `allow`, no body. */
const notAllowed = (allow: string) => async (_req: unknown, reply: FastifyReply) => reply.status(405).header('allow', allow).send();

export function limitRuleRoutes(ctx: AdminContext) {
  const { registry } = ctx;
  return async (r: FastifyInstance) => {
    r.put('/limits/rules', async (req) => {
      const reqs = sequence(req.body).map((v, i) => upsert(v, `[${i}]`));
      const { book, rules } = await registry.upsertLimitRules(reqs);
      // Also when nothing changed: a partition that missed the last change catches up.
      await ctx.applyLimitRules(book);
      return rules.map(ruleView);
    });
    r.post('/limits/rules/bulk-delete', async (req) => {
      const reqs = sequence(req.body).map((v, i) => deletion(v, `[${i}]`));
      const { book, removed } = await registry.deleteLimitRules(reqs);
      await ctx.applyLimitRules(book);
      return removed;
    });
    // A flow-control queue (a scope and limit key) paused: its invocations wait even with slots free.
    r.post<{ Params: { id: string; action: string } }>('/vqueues/:id/:action', async (req, reply) => {
      const { id, action } = req.params;
      if (action !== 'pause' && action !== 'resume') throw new KeelError('KEEL0004', `no route for /vqueues/${id}/${action}: use pause or resume`);
      const q = parseVqueueId(id);
      if (q === undefined) throw new KeelError('KEEL0004', `vqueue '${id}' not found: queue ids are in sys_vqueue_meta (restate vqueues list)`);
      const source = ctx.source();
      if (source.pauseFlowQueue === undefined) throw new KeelError('KEEL0004', `vqueue '${id}' not found: this node has no partitions`);
      await source.pauseFlowQueue(q.scope, q.limit_key, action === 'pause');
      ctx.logger.info({ vqueue: id, scope: q.scope, limit_key: q.limit_key }, `flow-control queue ${action === 'pause' ? 'paused' : 'resumed'}`);
      return reply.code(202).send();
    });
    // Keel's own: the most attempts a deployment runs at once (null: no limit); the invoker holds
    // the rest back. `concurrency` is the operator's, `manifest_invocations` the endpoint's
    // manifest's (limits.invocations); the operator's wins.
    const limitsOf = (id: string) => {
      const l = registry.deploymentLimitsOf(id);
      if (l === undefined) throw new KeelError('KEEL0004', `deployment '${id}' not found`);
      return { deployment: id, concurrency: l.operator ?? null, manifest_invocations: l.manifest ?? null, effective_concurrency: registry.deploymentConcurrency(id) ?? null };
    };
    r.get<{ Params: { id: string } }>('/deployments/:id/limits', async (req) => limitsOf(req.params.id));
    r.put<{ Params: { id: string } }>('/deployments/:id/limits', async (req) => {
      const { id } = req.params;
      const body = req.body;
      if (!isMap(body) || !('concurrency' in body)) throw new KeelError('KEEL0002', 'the body must be {"concurrency": N} (an integer from 1) or {"concurrency": null} (no limit)');
      const c = body.concurrency;
      if (c !== null && (typeof c !== 'number' || !Number.isInteger(c) || c < 1 || c > MAX_U32)) {
        throw new KeelError('KEEL0002', `the field concurrency must be an integer from 1 to ${MAX_U32}, or null for no limit: got ${JSON.stringify(c).slice(0, 40)}`);
      }
      await registry.setDeploymentConcurrency(id, c);
      return limitsOf(id);
    });
    r.route({ method: ['GET', 'POST', 'PATCH', 'DELETE'], url: '/limits/rules', handler: notAllowed('PUT') });
    r.route({ method: ['GET', 'PUT', 'PATCH', 'DELETE'], url: '/limits/rules/bulk-delete', handler: notAllowed('POST') });
  };
}
