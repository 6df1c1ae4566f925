// keel services ls|describe

import type { Command } from 'commander';
import type { Ctx } from '../context.js';
import { fields, out, printJson, statusColor, table } from '../output.js';
import { lit } from '../sql.js';
import type { CtxFactory } from './common.js';

interface Handler {
  name: string;
  ty?: string;
  public?: boolean;
  input_description?: string;
  output_description?: string;
}

interface Service {
  name: string;
  ty: string;
  revision: number;
  deployment_id: string;
  public?: boolean;
  handlers: Handler[];
  idempotency_retention?: string;
  workflow_completion_retention?: string;
  journal_retention?: string;
  inactivity_timeout?: string;
  abort_timeout?: string;
  retry_policy?: { initial_interval?: string; exponentiation_factor?: number; max_attempts?: number | null; max_interval?: string; on_max_attempts?: string };
  documentation?: string;
}

async function list(ctx: Ctx): Promise<void> {
  const { services } = await ctx.admin.call<{ services: Service[] }>('GET', '/services');
  services.sort((a, b) => a.name.localeCompare(b.name));
  if (ctx.json) {
    printJson(services);
    return;
  }
  if (services.length === 0) {
    out(ctx.c.dim('No services. Register a deployment with: keel deployments register <uri>'));
    return;
  }
  out(
    table(
      ['NAME', 'TYPE', 'REVISION', 'PUBLIC', 'HANDLERS', 'DEPLOYMENT'],
      services.map((s) => [s.name, s.ty, s.revision, s.public === false ? ctx.c.yellow('no') : 'yes', s.handlers.map((h) => h.name).join(', '), s.deployment_id]),
      ctx.c,
    ),
  );
}

async function describe(ctx: Ctx, name: string): Promise<void> {
  const s = await ctx.admin.call<Service>('GET', `/services/${encodeURIComponent(name)}`);
  const counts = await ctx.admin.query(
    `SELECT target_handler_name, status, COUNT(*) AS n FROM sys_invocation WHERE target_service_name = ${lit(s.name)} ` +
      `GROUP BY target_handler_name, status ORDER BY target_handler_name, status`,
  );
  const invocations = counts.map((r) => ({ handler: String(r.target_handler_name), status: String(r.status), count: Number(r.n) }));
  if (ctx.json) {
    printJson({ ...s, invocations });
    return;
  }
  const c = ctx.c;
  const r = s.retry_policy;
  out(
    fields(
      [
        ['Name', c.bold(s.name)],
        ['Type', s.ty],
        ['Revision', s.revision],
        ['Deployment', s.deployment_id],
        ['Public', s.public === false ? 'no (only callable from other services)' : 'yes'],
        ['Documentation', s.documentation],
        ['Idempotency retention', s.idempotency_retention],
        ['Workflow retention', s.workflow_completion_retention],
        ['Journal retention', s.journal_retention],
        ['Inactivity timeout', s.inactivity_timeout],
        ['Abort timeout', s.abort_timeout],
        [
          'Retry policy',
          r
            ? `${r.initial_interval ?? '?'} ×${r.exponentiation_factor ?? '?'} up to ${r.max_interval ?? '?'}, ${r.max_attempts ?? 'unlimited'} attempts, then ${String(r.on_max_attempts ?? '?').toLowerCase()}`
            : undefined,
        ],
      ],
      c,
    ),
  );
  out('');
  out(
    table(
      ['HANDLER', 'TYPE', 'PUBLIC', 'INPUT', 'OUTPUT'],
      s.handlers.map((h) => [h.name, h.ty ?? '', h.public === false ? c.yellow('no') : 'yes', h.input_description ?? '', h.output_description ?? '']),
      c,
    ),
  );
  out('');
  if (invocations.length === 0) {
    out(c.dim('No invocations retained for this service.'));
    return;
  }
  out(c.bold('Invocations by handler and status:'));
  out(table(['HANDLER', 'STATUS', 'COUNT'], invocations.map((i) => [i.handler, statusColor(i.status, c), i.count]), c));
}

export function servicesCommand(program: Command, ctxOf: CtxFactory): void {
  const svc = program.command('services').alias('svc').description('list and describe services');
  svc.command('list')
    .alias('ls')
    .description('list the registered services (latest revisions)')
    .action(async (_o: unknown, cmd: Command) => list(ctxOf(cmd)));
  svc.command('describe')
    .alias('get')
    .argument('<name>', 'service name')
    .description('show a service: handlers, retention, timeouts, retry policy and its invocations by status')
    .action(async (name: string, _o: unknown, cmd: Command) => describe(ctxOf(cmd), name));
}
