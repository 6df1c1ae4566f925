// keel deployments register|list|describe|remove

import type { Command } from 'commander';
import { adminError } from '../admin.js';
import type { Ctx } from '../context.js';
import { CliError, EXIT, usage } from '../errors.js';
import { ageOf, fields, out, printJson, table, timeOf } from '../output.js';
import { lit } from '../sql.js';
import type { CtxFactory } from './common.js';
import type { ReplayReport } from '../../admin/replay-check.js';
import type { EntryRef } from '../../invoker/replay-check.js';

interface Handler {
  name: string;
  ty?: string;
}

interface Service {
  name: string;
  ty: string;
  revision: number;
  deployment_id: string;
  public?: boolean;
  handlers: Handler[];
}

interface Deployment {
  id: string;
  uri?: string;
  arn?: string;
  protocol_type?: string;
  http_version?: string;
  created_at?: string;
  min_protocol_version?: number;
  max_protocol_version?: number;
  sdk_version?: string;
  additional_headers?: Record<string, string>;
  metadata?: Record<string, string>;
  services: Array<{ name: string; revision: number } & Partial<Service>>;
}

interface RegisterAnswer {
  id: string;
  services: Service[];
  min_protocol_version?: number;
  max_protocol_version?: number;
  sdk_version?: string;
}

export interface ServiceChange {
  name: string;
  ty: string;
  revision: number;
  /** new | updated | unchanged */
  change: 'new' | 'updated' | 'unchanged';
  previous_revision?: number;
  previous_ty?: string;
  handlers_added: string[];
  handlers_removed: string[];
  handlers_changed: string[];
}

/** What registering `found` changes against the services registered now. */
export function planChanges(found: Service[], current: Service[], existing: boolean): ServiceChange[] {
  return found.map((s) => {
    const cur = current.find((c) => c.name === s.name);
    const base = { name: s.name, ty: s.ty, revision: s.revision, handlers_added: [] as string[], handlers_removed: [] as string[], handlers_changed: [] as string[] };
    if (!cur) return { ...base, change: 'new', handlers_added: s.handlers.map((h) => h.name) };
    if (existing || (cur.revision === s.revision && cur.deployment_id === s.deployment_id)) return { ...base, change: 'unchanged' };
    const now = new Map(s.handlers.map((h) => [h.name, h]));
    const before = new Map(cur.handlers.map((h) => [h.name, h]));
    return {
      ...base,
      change: 'updated',
      previous_revision: cur.revision,
      ...(cur.ty !== s.ty ? { previous_ty: cur.ty } : {}),
      handlers_added: [...now.keys()].filter((n) => !before.has(n)),
      handlers_removed: [...before.keys()].filter((n) => !now.has(n)),
      handlers_changed: [...now.values()].filter((h) => before.has(h.name) && (before.get(h.name)!.ty ?? '') !== (h.ty ?? '')).map((h) => h.name),
    };
  });
}

function keyValues(flag: string, value: string, previous: Record<string, string> | undefined): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw usage(`${flag}: expected name=value, got '${value}'`);
  return { ...(previous ?? {}), [value.slice(0, eq)]: value.slice(eq + 1) };
}

function checkDeploymentId(id: string): void {
  if (!/^dp_[0-9A-Za-z]+$/.test(id)) throw usage(`'${id}' is not a deployment id (they look like dp_14LsPzTTe7X2Bv1gcKB6SYb)`);
}

function endpointOf(d: Deployment): string {
  return d.uri ?? d.arn ?? '';
}

function kindOf(d: Deployment): string {
  if (d.arn) return 'Lambda';
  return [d.http_version, d.protocol_type].filter(Boolean).join(' ');
}

function handlerChanges(ch: ServiceChange, ctx: Ctx): string {
  const c = ctx.c;
  return [...ch.handlers_added.map((h) => c.green(`+${h}`)), ...ch.handlers_removed.map((h) => c.red(`-${h}`)), ...ch.handlers_changed.map((h) => c.yellow(`~${h}`))].join(' ');
}

function changeText(ch: ServiceChange, ctx: Ctx): string {
  const c = ctx.c;
  if (ch.change === 'new') return c.green('new service');
  if (ch.change === 'unchanged') return c.dim('unchanged');
  const ty = ch.previous_ty ? c.yellow(` (type ${ch.previous_ty} → ${ch.ty})`) : '';
  return `${c.yellow('revision')} ${ch.previous_revision} → ${ch.revision}${ty}`;
}

const entryText = (e: EntryRef | undefined): string =>
  e === undefined ? '' : [e.index !== undefined ? `#${e.index}` : e.command !== undefined ? `command ${e.command}` : '', e.type ?? '', e.name ? `"${e.name}"` : ''].filter(Boolean).join(' ');

/** The report as a table: each invocation's verdict, the recorded and the new entry side by side. */
function printReplayReport(ctx: Ctx, r: ReplayReport): void {
  const c = ctx.c;
  if (r.deployment.replaces === undefined) {
    out(`No deployment is registered at ${c.bold(r.deployment.uri)}: invocations in flight stay on the deployments they started on, so none would run this code. Nothing to replay.`);
    return;
  }
  const skipped = Object.entries(r.not_replayed).map(([status, n]) => `${n} ${status}`).join(', ');
  out(`Replayed ${r.checked} of ${r.suspended} suspended invocation(s) of ${r.deployment.services.join(', ') || 'no service'} against ${c.bold(r.deployment.uri)}`);
  if (skipped) out(c.dim(`Not replayed (a replay could run their side effects again): ${skipped}`));
  if (r.invocations.length > 0) {
    const rows = r.invocations.map((v) => {
      if (v.verdict === 'compatible') return [v.id, v.target, c.green('compatible'), '', '', c.dim(v.ended === 'new-command' ? `then ${entryText(v.next)}` : v.ended)];
      const [verdict, sides] = v.verdict === 'mismatch' ? [c.red('MISMATCH'), [entryText(v.recorded), entryText(v.new)]] : [c.yellow('failed'), ['', '']];
      return [v.id, v.target, verdict, ...sides, `[${v.error_code}] ${v.message}`];
    });
    out(table(['INVOCATION', 'TARGET', 'VERDICT', 'RECORDED', 'NEW CODE', 'DETAIL'], rows, c));
  }
  out(r.passed ? c.green(`All ${r.checked} replayed unchanged.`) : c.red(`${r.mismatched} mismatch(es), ${r.failed} failed replay(s).`));
}

function destinationBody(target: string, o: Record<string, unknown>): Record<string, unknown> {
  const body: Record<string, unknown> = target.startsWith('arn:') ? { arn: target } : { uri: target };
  if (body.uri !== undefined) {
    try {
      const u = new URL(target);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error();
    } catch {
      throw usage(`'${target}' is not an http(s) URI or a Lambda ARN`);
    }
  }
  return { ...body, additional_headers: (o.header as Record<string, string> | undefined) ?? null, use_http_11: o.useHttp11 === true };
}

function sampleOf(o: Record<string, unknown>): number | 'all' | undefined {
  if (o.sample === undefined) return undefined;
  if (o.sample === 'all') return 'all';
  const n = Number(o.sample);
  if (!Number.isInteger(n) || n < 1 || n > 10_000) throw usage(`--sample: expected 'all' or an integer from 1 to 10000, got '${String(o.sample)}'`);
  return n;
}

/** keel deployments check: the replay check alone; exits 1 unless every replay was compatible. */
async function check(ctx: Ctx, target: string, o: Record<string, unknown>): Promise<void> {
  const sample = sampleOf(o);
  const body = { ...destinationBody(target, o), ...(sample !== undefined ? { sample } : {}) };
  const report = await ctx.spin(
    `Replaying suspended invocations against ${target}`,
    async () => {
      const a = await ctx.admin.request('POST', '/deployments/replay-check', body);
      if (a.status >= 400) throw adminError('POST', ctx.admin.url('/deployments/replay-check'), a);
      return a.json as ReplayReport;
    },
    (r) => `Replayed ${r.checked} invocation(s)`,
  );
  if (ctx.json) printJson(report);
  else printReplayReport(ctx, report);
  if (!report.passed) throw new CliError(`the replay check of ${target} did not pass`, EXIT.SERVER, { hint: 'keep the old code serving the invocations in flight (register the new code at a new URI), or let them finish first' });
}

async function register(ctx: Ctx, target: string, o: Record<string, unknown>): Promise<void> {
  const body: Record<string, unknown> = { ...destinationBody(target, o), breaking: o.breaking === true, force: o.force === true };
  if (o.metadata) body.metadata = o.metadata;

  const hintFor = (err: CliError): CliError => {
    if (err.details.code === 'META0006') err.details.hint = 'register it anyway with --breaking (in-flight invocations of the old revision may fail)';
    if (err.details.code === 'META0004') err.details.hint = 'overwrite the deployment at this URI with --force (in-flight invocations may become unrecoverable)';
    if (err.details.code === 'KEEL1002') err.details.hint = 'keel deployments check <uri> shows each invocation\'s first differing entry';
    return err;
  };
  const sample = sampleOf(o);
  if (o.check === true) body.replay_check = { refuse_on_mismatch: true, ...(sample !== undefined ? { sample } : {}) };

  const { preview, current } = await ctx.spin(
    `Discovering ${target}`,
    async () => {
      const a = await ctx.admin.request('POST', '/deployments', { ...body, dry_run: true });
      if (a.status >= 400) throw hintFor(adminError('POST', ctx.admin.url('/deployments'), a));
      const current = (await ctx.admin.call<{ services: Service[] }>('GET', '/services')).services ?? [];
      return { preview: { status: a.status, body: a.json as RegisterAnswer }, current };
    },
    (r) => `Discovered ${r.preview.body.services.length} service(s) at ${target}`,
  );
  const existing = preview.status === 200;
  const plan = planChanges(preview.body.services, current, existing && o.force !== true);
  // The dry run refused (KEEL1002) unless every replay passed; the report is shown before asking.
  const replayed = (preview.body as RegisterAnswer & { replay_check?: ReplayReport }).replay_check;
  delete body.replay_check;

  if (existing && plan.every((p) => p.change === 'unchanged')) {
    if (replayed !== undefined && !ctx.json) printReplayReport(ctx, replayed);
    if (ctx.json) printJson({ id: preview.body.id, created: false, changed: false, services: plan });
    else out(`Deployment ${ctx.c.bold(preview.body.id)} already serves ${target} with the same services: nothing to change.\n${ctx.c.dim('(--force re-registers it)')}`);
    return;
  }

  if (!ctx.json) {
    const sdk = preview.body.sdk_version ? `${preview.body.sdk_version}, ` : '';
    out(`${existing ? ctx.c.yellow('Overwriting') : 'New'} deployment at ${ctx.c.bold(target)} (${sdk}protocol ${preview.body.min_protocol_version}–${preview.body.max_protocol_version})`);
    out(table(['SERVICE', 'TYPE', 'CHANGE', 'HANDLERS'], plan.map((p) => [p.name, p.ty, changeText(p, ctx), handlerChanges(p, ctx)]), ctx.c));
  }
  if (replayed !== undefined && !ctx.json) printReplayReport(ctx, replayed);
  await ctx.confirm(`Register ${target}${plan.length ? ` (${plan.length} service${plan.length === 1 ? '' : 's'})` : ''}?`);

  const a = await ctx.admin.request('POST', '/deployments', { ...body, dry_run: false });
  if (a.status >= 400) throw hintFor(adminError('POST', ctx.admin.url('/deployments'), a));
  const done = a.json as RegisterAnswer;
  const final = planChanges(done.services, current, false);
  if (ctx.json) {
    printJson({ id: done.id, created: a.status === 201, changed: true, services: final });
    return;
  }
  out(`${ctx.c.green('Registered')} deployment ${ctx.c.bold(done.id)}`);
  out(table(['SERVICE', 'REVISION'], done.services.map((s) => [s.name, s.revision]), ctx.c));
}

async function list(ctx: Ctx): Promise<void> {
  const [{ deployments }, { services }] = await Promise.all([
    ctx.admin.call<{ deployments: Deployment[] }>('GET', '/deployments'),
    ctx.admin.call<{ services: Service[] }>('GET', '/services'),
  ]);
  const latest = new Set(services.map((s) => `${s.deployment_id}/${s.name}`));
  const active = (d: Deployment) => d.services.some((s) => latest.has(`${d.id}/${s.name}`));
  if (ctx.json) {
    printJson(deployments.map((d) => ({ ...d, active: active(d) })));
    return;
  }
  if (deployments.length === 0) {
    out(ctx.c.dim('No deployments. Register one with: keel deployments register <uri>'));
    return;
  }
  const rows = deployments.map((d) => [
    d.id,
    endpointOf(d),
    kindOf(d),
    active(d) ? ctx.c.green('active') : ctx.c.dim('superseded'),
    ageOf(d.created_at),
    d.services.map((s) => `${s.name}@${s.revision}`).join(', '),
  ]);
  out(table(['ID', 'ENDPOINT', 'TYPE', 'STATUS', 'CREATED', 'SERVICES'], rows, ctx.c));
}

async function pinnedInvocations(ctx: Ctx, id: string): Promise<Array<{ service: string; handler: string; count: number }>> {
  const rows = await ctx.admin.query(
    `SELECT target_service_name, target_handler_name, COUNT(*) AS n FROM sys_invocation WHERE pinned_deployment_id = ${lit(id)} AND status <> 'completed' ` +
      `GROUP BY target_service_name, target_handler_name ORDER BY target_service_name, target_handler_name`,
  );
  return rows.map((r) => ({ service: String(r.target_service_name), handler: String(r.target_handler_name), count: Number(r.n) }));
}

async function describe(ctx: Ctx, id: string): Promise<void> {
  checkDeploymentId(id);
  const [d, { services }] = await Promise.all([
    ctx.admin.call<Deployment>('GET', `/deployments/${encodeURIComponent(id)}`),
    ctx.admin.call<{ services: Service[] }>('GET', '/services'),
  ]);
  const pinned = await pinnedInvocations(ctx, id);
  if (ctx.json) {
    printJson({ ...d, pinned_invocations: pinned });
    return;
  }
  const c = ctx.c;
  const headers = d.additional_headers && Object.keys(d.additional_headers).length ? Object.keys(d.additional_headers).join(', ') : undefined;
  const meta = d.metadata && Object.keys(d.metadata).length ? Object.entries(d.metadata).map(([k, v]) => `${k}=${v}`).join(', ') : undefined;
  out(
    fields(
      [
        ['ID', d.id],
        ['Endpoint', endpointOf(d)],
        ['Type', kindOf(d)],
        ['SDK', d.sdk_version],
        ['Protocol', d.min_protocol_version !== undefined ? `v${d.min_protocol_version}–v${d.max_protocol_version}` : undefined],
        ['Created', d.created_at ? `${timeOf(d.created_at)} (${ageOf(d.created_at)})` : undefined],
        ['Headers', headers],
        ['Metadata', meta],
      ],
      c,
    ),
  );
  out('');
  const latestRev = new Map(services.map((s) => [s.name, s]));
  const rows = d.services.map((s) => {
    const l = latestRev.get(s.name);
    const status = l && l.deployment_id === d.id ? c.green('latest') : l ? c.dim(`superseded by rev ${l.revision} (${l.deployment_id})`) : c.dim('removed');
    return [s.name, s.ty ?? '', s.revision, status, (s.handlers ?? []).map((h) => h.name).join(', ')];
  });
  out(table(['SERVICE', 'TYPE', 'REVISION', 'STATUS', 'HANDLERS'], rows, c));
  out('');
  const total = pinned.reduce((a, p) => a + p.count, 0);
  out(`${c.bold('Invocations pinned to this deployment (not completed):')} ${total}`);
  if (total > 0) out(table(['SERVICE', 'HANDLER', 'COUNT'], pinned.map((p) => [p.service, p.handler, p.count]), c));
}

async function remove(ctx: Ctx, id: string, force: boolean): Promise<void> {
  checkDeploymentId(id);
  const [d, { services }] = await Promise.all([
    ctx.admin.call<Deployment>('GET', `/deployments/${encodeURIComponent(id)}`),
    ctx.admin.call<{ services: Service[] }>('GET', '/services'),
  ]);
  const pinned = await pinnedInvocations(ctx, id);
  const total = pinned.reduce((a, p) => a + p.count, 0);
  const serving = services.filter((s) => s.deployment_id === id).map((s) => s.name);
  if (!ctx.json) {
    out(`Deployment ${ctx.c.bold(id)} at ${endpointOf(d)}`);
    out(`  latest revision of: ${serving.length ? serving.join(', ') : ctx.c.dim('no service')}`);
    out(`  pinned invocations not completed: ${total}`);
  }
  if ((serving.length > 0 || total > 0) && !force) {
    throw new CliError(
      serving.length > 0
        ? `deployment ${id} still serves the latest revision of ${serving.join(', ')}: removing it makes ${serving.length === 1 ? 'that service' : 'those services'} unavailable`
        : `${total} invocation(s) pinned to deployment ${id} are not completed: they cannot finish once it is removed`,
      EXIT.SERVER,
      { hint: 'pass --force to remove it anyway' },
    );
  }
  await ctx.confirm(`Remove deployment ${id}?`);
  const a = await ctx.admin.request('DELETE', `/deployments/${encodeURIComponent(id)}?force=true`);
  if (a.status >= 400) throw adminError('DELETE', ctx.admin.url(`/deployments/${id}?force=true`), a);
  if (ctx.json) printJson({ id, removed: true });
  else out(`${ctx.c.green('Removed')} deployment ${id}`);
}

export function deploymentsCommand(program: Command, ctxOf: CtxFactory): void {
  const dp = program.command('deployments').alias('dp').description('register, list, describe and remove deployments');
  dp.command('register')
    .alias('add')
    .argument('<uri>', 'service endpoint URI (http://host:port/), or a Lambda function ARN')
    .description('discover the services at <uri>, show what changes, and register them')
    .option('--use-http1.1', 'talk to the endpoint over HTTP/1.1 (request-response)')
    .option('--force', 'overwrite an existing deployment at the same URI')
    .option('--breaking', 'accept incompatible changes to existing services')
    .option('--header <name=value>', 'extra header sent to the endpoint (repeatable)', (v: string, p: Record<string, string> | undefined) => keyValues('--header', v, p))
    .option('--metadata <name=value>', 'metadata stored with the deployment (repeatable)', (v: string, p: Record<string, string> | undefined) => keyValues('--metadata', v, p))
    .option('--check', 'replay suspended invocations of its services against it first; refuse to register if any does not replay unchanged')
    .option('--sample <n>', 'with --check: how many suspended invocations to replay: 1 to 10000 or all (default 20)')
    .action(async (uri: string, o: Record<string, unknown>, cmd: Command) => {
      // commander names `--use-http1.1` useHttp1.1
      const opts = { ...o, useHttp11: o['useHttp1.1'] === true };
      await register(ctxOf(cmd), uri, opts);
    });
  dp.command('check')
    .argument('<uri>', 'service endpoint URI (new code, perhaps behind a URI registered already), or a Lambda function ARN')
    .description('replay the journals of suspended invocations of its services against <uri>, without side effects, and report which replay unchanged')
    .option('--use-http1.1', 'talk to the endpoint over HTTP/1.1 (request-response)')
    .option('--header <name=value>', 'extra header sent to the endpoint (repeatable)', (v: string, p: Record<string, string> | undefined) => keyValues('--header', v, p))
    .option('--sample <n>', 'how many suspended invocations to replay: 1 to 10000 or all (default 20)')
    .action(async (uri: string, o: Record<string, unknown>, cmd: Command) => check(ctxOf(cmd), uri, { ...o, useHttp11: o['useHttp1.1'] === true }));
  dp.command('list')
    .alias('ls')
    .description('list deployments')
    .action(async (_o: unknown, cmd: Command) => list(ctxOf(cmd)));
  dp.command('describe')
    .alias('get')
    .argument('<id>', 'deployment id')
    .description('show a deployment, its services and the invocations pinned to it')
    .action(async (id: string, _o: unknown, cmd: Command) => describe(ctxOf(cmd), id));
  dp.command('remove')
    .alias('rm')
    .argument('<id>', 'deployment id')
    .option('--force', 'remove it even if it serves the latest revision of a service or has unfinished invocations')
    .description('remove a deployment (asks first)')
    .action(async (id: string, o: { force?: boolean }, cmd: Command) => remove(ctxOf(cmd), id, o.force === true));
}
