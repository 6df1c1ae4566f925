// keel invocations ls|describe|cancel|kill|pause|resume|purge

import { Option, type Command } from 'commander';
import { explain } from '../../errors/index.js';
import { adminError, type Row } from '../admin.js';
import type { Ctx } from '../context.js';
import { CliError, EXIT, notFound, stripCode, usage } from '../errors.js';
import { analyseMismatch, renderMismatch, renderTimeline } from '../journal.js';
import { ageOf, fields, out, printJson, statusColor, table, timeOf } from '../output.js';
import { filterConditions, inList, listOption, lit, STATUSES, whereSql, type InvocationFilter } from '../sql.js';
import type { CtxFactory } from './common.js';

const LIST_COLUMNS = [
  'id', 'target', 'target_service_name', 'target_handler_name', 'target_service_key', 'target_service_ty', 'status',
  'created_at', 'modified_at', 'retry_count', 'next_retry_at', 'pinned_deployment_id', 'last_failure_error_code',
  'last_failure', 'completion_result', 'completion_failure', 'idempotency_key', 'invoked_by_id', 'invoked_by_target',
];

const INVOCATION_ID = /^inv_[0-9A-Za-z]+$/;

const JOURNAL_COLUMNS = ['"index"', 'entry_type', 'name', 'completed', 'invoked_id', 'invoked_target', 'sleep_wakeup_at', 'promise_name', 'appended_at'];

function addFilterOptions(cmd: Command): Command {
  return cmd
    .option('-s, --service <names>', 'only these services (comma-separated or repeated)', listOption)
    .option('--handler <names>', 'only these handlers', listOption)
    .option('-k, --key <keys>', 'only these object/workflow keys', listOption)
    .addOption(new Option('--status <statuses>', `only these statuses (${STATUSES.join(', ')})`).argParser(listOption))
    .option('--older-than <duration>', 'created at least this long ago (30s, 5m, 2h, 1d)')
    .option('--newer-than <duration>', 'created at most this long ago')
    .option('--failure-code <codes>', 'last failure code (RT0016, RT0007…) or terminal failure status (500)', listOption)
    .option('--deployment <ids>', 'pinned to or last attempted on these deployments', listOption);
}

function filterOf(o: Record<string, unknown>): InvocationFilter {
  const f: InvocationFilter = {};
  for (const k of ['service', 'handler', 'key', 'status', 'failureCode', 'deployment'] as const) if (o[k]) f[k] = o[k] as string[];
  if (typeof o.olderThan === 'string') f.olderThan = o.olderThan;
  if (typeof o.newerThan === 'string') f.newerThan = o.newerThan;
  return f;
}

function limitOf(o: Record<string, unknown>, dflt: number): number {
  if (o.limit === undefined) return dflt;
  const n = Number(o.limit);
  if (!Number.isInteger(n) || n < 1) throw usage(`--limit: expected a positive integer, got '${o.limit}'`);
  return n;
}

function failureOf(r: Row): string {
  if (r.status === 'completed') return typeof r.completion_failure === 'string' ? String(r.completion_failure).replace(/^(\[\d+\]).*$/s, '$1') : '';
  return typeof r.last_failure_error_code === 'string' ? r.last_failure_error_code : '';
}

async function list(ctx: Ctx, o: Record<string, unknown>): Promise<void> {
  const conds = filterConditions(filterOf(o));
  if (!o.all && !o.status) conds.push(`status <> 'completed'`);
  const limit = limitOf(o, 100);
  const where = whereSql(conds);
  const order = o.oldestFirst ? 'ASC' : 'DESC';
  const [rows, total] = await Promise.all([
    ctx.admin.query(`SELECT ${LIST_COLUMNS.join(', ')} FROM sys_invocation${where} ORDER BY created_at ${order}, id LIMIT ${limit}`),
    ctx.admin.query(`SELECT COUNT(*) AS n FROM sys_invocation${where}`),
  ]);
  if (ctx.json) {
    printJson(rows);
    return;
  }
  const n = Number(total[0]?.n ?? rows.length);
  const c = ctx.c;
  if (rows.length === 0) {
    out(c.dim(`No invocations match${!o.all && !o.status ? ' (completed ones are hidden: --all shows them)' : ''}.`));
    return;
  }
  out(
    table(
      ['ID', 'TARGET', 'STATUS', 'CREATED', 'RETRIES', 'FAILURE'],
      rows.map((r) => [String(r.id), String(r.target ?? ''), statusColor(r.status, c), ageOf(r.created_at), Number(r.retry_count ?? 0) || '', c.red(failureOf(r))]),
      c,
    ),
  );
  out(c.dim(`Showing ${rows.length} of ${n} invocation${n === 1 ? '' : 's'}${!o.all && !o.status ? ' (not completed; --all includes completed)' : ''}.`));
}

async function describe(ctx: Ctx, id: string): Promise<void> {
  const rows = await ctx.admin.query(`SELECT * FROM sys_invocation WHERE id = ${lit(id)}`);
  const inv = rows[0];
  if (!inv) throw notFound(`invocation ${id} not found`);
  const journal = await ctx.admin.query(`SELECT ${JOURNAL_COLUMNS.join(', ')} FROM sys_journal WHERE id = ${lit(id)} ORDER BY "index"`);
  const mismatch = analyseMismatch(inv, journal);
  if (ctx.json) {
    printJson({ invocation: inv, journal, ...(mismatch ? { mismatch } : {}) });
    return;
  }
  const c = ctx.c;
  const code = typeof inv.last_failure_error_code === 'string' ? inv.last_failure_error_code : undefined;
  const entry = code ? explain(code) : undefined;
  out(
    fields(
      [
        ['ID', c.bold(String(inv.id))],
        ['Target', String(inv.target ?? '')],
        ['Status', statusColor(inv.status, c)],
        ['Created', `${timeOf(inv.created_at)} (${ageOf(inv.created_at)})`],
        ['Modified', inv.modified_at ? `${timeOf(inv.modified_at)} (${ageOf(inv.modified_at)})` : undefined],
        ['Invoked by', inv.invoked_by_target ? `${inv.invoked_by_target} (${inv.invoked_by_id})` : (inv.invoked_by as string | undefined)],
        ['Idempotency key', inv.idempotency_key as string | undefined],
        ['Deployment', inv.pinned_deployment_id as string | undefined],
        ['SDK', inv.last_attempt_server as string | undefined],
        ['Retries', Number(inv.retry_count ?? 0) || undefined],
        ['Next retry', inv.next_retry_at ? `${timeOf(inv.next_retry_at)} (${ageOf(inv.next_retry_at)})` : undefined],
        ['Result', inv.completion_result ? (inv.completion_result === 'success' ? c.green('success') : c.red(`failure ${inv.completion_failure ?? ''}`)) : undefined],
      ],
      c,
    ),
  );
  if (typeof inv.last_failure === 'string') {
    out('');
    out(`${c.bold(c.red(`Last failure${code ? ` [${code}]` : ''}:`))} ${entry ? entry.title : ''}`);
    for (const line of stripCode(inv.last_failure, code).split('\n')) out(`  ${line}`);
    if (entry) out(`  ${c.yellow('remedy:')} ${entry.remedy}`);
  }
  if (mismatch) {
    out('');
    out(renderMismatch(mismatch, c));
  }
  out('');
  out(c.bold(`Journal (${journal.length} entr${journal.length === 1 ? 'y' : 'ies'}):`));
  out(renderTimeline(journal, inv, mismatch, c));
}

type Action = 'cancel' | 'kill' | 'pause' | 'resume' | 'purge';

const ACTIONS: Record<Action, { verb: string; past: string; applicable: string; describe: string }> = {
  cancel: { verb: 'Cancel', past: 'Cancelled', applicable: `status <> 'completed'`, describe: 'cancel invocations gracefully (compensations run)' },
  kill: { verb: 'Kill', past: 'Killed', applicable: `status <> 'completed'`, describe: 'kill invocations at once (no compensation; partial progress is lost)' },
  pause: { verb: 'Pause', past: 'Paused', applicable: inList('status', ['running', 'ready', 'backing-off', 'suspended']), describe: 'pause invocations (no more attempts until resumed)' },
  resume: { verb: 'Resume', past: 'Resumed', applicable: inList('status', ['paused', 'suspended', 'backing-off']), describe: 'resume paused invocations (a backing-off one retries now)' },
  purge: { verb: 'Purge', past: 'Purged', applicable: `status = 'completed'`, describe: 'delete completed invocations (their journal, output and idempotency entry)' },
};

interface ActionResult {
  id: string;
  ok: boolean;
  status: number;
  message?: string;
  restate_code?: string | null;
}

async function patchAll(ctx: Ctx, action: Action, ids: string[]): Promise<ActionResult[]> {
  const results: ActionResult[] = new Array(ids.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= ids.length) return;
      const id = ids[i]!;
      const a = await ctx.admin.request('PATCH', `/invocations/${encodeURIComponent(id)}/${action}`);
      if (a.status < 300) results[i] = { id, ok: true, status: a.status };
      else {
        const e = adminError('PATCH', ctx.admin.url(`/invocations/${id}/${action}`), a);
        results[i] = { id, ok: false, status: a.status, message: stripCode(e.message, e.details.code), restate_code: e.details.code ?? null };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(16, ids.length) }, worker));
  return results;
}

async function act(ctx: Ctx, action: Action, ids: string[], o: Record<string, unknown>): Promise<void> {
  const spec = ACTIONS[action];
  const f = filterOf(o);
  const conds = filterConditions(f);
  if (ids.length > 0 && conds.length > 0) throw usage(`give invocation ids or a filter, not both`);

  for (const id of ids) if (!INVOCATION_ID.test(id)) throw usage(`'${id}' is not an invocation id (they look like inv_1gabxA3iqxx57u55FE297v8I4FjVJZ7xEY)`);
  if (ids.length > 0) {
    // Explicit ids: act on each, no confirmation.
    const results = await patchAll(ctx, action, ids);
    report(ctx, action, results, ids.length);
    const failed = results.filter((r) => !r.ok);
    if (failed.length === 0) return;
    if (ids.length === 1) {
      const r = failed[0]!;
      throw new CliError(r.message ?? `cannot ${action} ${r.id}`, r.status === 404 ? EXIT.NOT_FOUND : EXIT.SERVER, {
        code: r.restate_code ?? null,
        status: r.status,
        method: 'PATCH',
        url: ctx.admin.url(`/invocations/${r.id}/${action}`),
      });
    }
    throw new CliError(`${failed.length} of ${ids.length} invocations could not be ${spec.past.toLowerCase()}`, EXIT.SERVER);
  }

  if (conds.length === 0) {
    throw usage(`${action}: give invocation ids, or a filter (--service, --handler, --key, --status, --older-than, --newer-than, --failure-code, --deployment)`);
  }
  const limit = limitOf(o, 1000);
  const where = whereSql([...conds, spec.applicable]);
  const [rows, total] = await Promise.all([
    ctx.admin.query(`SELECT id, target, status, created_at FROM sys_invocation${where} ORDER BY created_at, id LIMIT ${limit}`),
    ctx.admin.query(`SELECT COUNT(*) AS n FROM sys_invocation${where}`),
  ]);
  const matched = Number(total[0]?.n ?? rows.length);
  if (rows.length === 0) {
    if (ctx.json) printJson({ action, matched: 0, done: [], failed: [] });
    else out(ctx.c.dim(`No invocations to ${action} match the filter.`));
    return;
  }
  const c = ctx.c;
  if (!ctx.json) {
    const shown = rows.slice(0, 10);
    out(table(['ID', 'TARGET', 'STATUS', 'CREATED'], shown.map((r) => [String(r.id), String(r.target ?? ''), statusColor(r.status, c), ageOf(r.created_at)]), c));
    if (rows.length > shown.length) out(c.dim(`… and ${rows.length - shown.length} more`));
    if (matched > rows.length) out(c.yellow(`${matched} invocations match; this run acts on the oldest ${rows.length} (--limit raises it).`));
  }
  const n = rows.length;
  await ctx.confirm(`${spec.verb} ${n} invocation${n === 1 ? '' : 's'}?`);
  const results = await ctx.spin(
    `${spec.verb.replace(/e$/, '')}ing ${n} invocation${n === 1 ? '' : 's'}`,
    () =>
      patchAll(
        ctx,
        action,
        rows.map((r) => String(r.id)),
      ),
    (r) => `${r.filter((x) => x.ok).length} of ${n} done`,
  );
  report(ctx, action, results, matched);
  const failed = results.filter((r) => !r.ok);
  if (failed.length > 0) throw new CliError(`${failed.length} of ${n} invocations could not be ${spec.past.toLowerCase()}`, EXIT.SERVER);
}

function report(ctx: Ctx, action: Action, results: ActionResult[], matched: number): void {
  const done = results.filter((r) => r.ok).map((r) => r.id);
  const failed = results.filter((r) => !r.ok);
  if (ctx.json) {
    printJson({ action, matched, done, failed: failed.map(({ id, status, message, restate_code }) => ({ id, status, message, restate_code })) });
    return;
  }
  const c = ctx.c;
  if (done.length > 0) out(`${c.green(ACTIONS[action].past)} ${done.length} invocation${done.length === 1 ? '' : 's'}${done.length === 1 ? ` (${done[0]})` : ''}.`);
  if (failed.length > 0 && results.length > 1) {
    out(c.red(`${failed.length} failed:`));
    out(table(['ID', 'HTTP', 'ERROR'], failed.map((r) => [r.id, r.status, r.message ?? '']), c));
  }
}

export function invocationsCommand(program: Command, ctxOf: CtxFactory): void {
  const inv = program.command('invocations').alias('inv').description('list, inspect and manage invocations');
  addFilterOptions(
    inv
      .command('list')
      .alias('ls')
      .description('list invocations, newest first (completed ones only with --all or --status)')
      .option('-a, --all', 'include completed invocations')
      .option('-n, --limit <n>', 'at most this many rows (default 100)')
      .option('--oldest-first', 'oldest first'),
  ).action(async (o: Record<string, unknown>, cmd: Command) => list(ctxOf(cmd), o));
  inv.command('describe')
    .alias('get')
    .argument('<id>', 'invocation id (inv_…)')
    .description('show an invocation, its last failure with the remedy, and its journal as a timeline')
    .action(async (id: string, _o: unknown, cmd: Command) => describe(ctxOf(cmd), id));
  for (const action of Object.keys(ACTIONS) as Action[]) {
    addFilterOptions(
      inv
        .command(action)
        .argument('[ids...]', 'invocation ids; without ids, the filter options select them')
        .description(`${ACTIONS[action].describe}; with a filter, shows the count and asks first`)
        .option('-n, --limit <n>', 'act on at most this many (default 1000)'),
    ).action(async (ids: string[], o: Record<string, unknown>, cmd: Command) => act(ctxOf(cmd), action, ids, o));
  }
}
