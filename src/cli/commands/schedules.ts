// keel schedules ls|describe|set|pause|resume|trigger|delete (Keel's own schedules, /schedules)

import type { Command } from 'commander';
import type { Ctx } from '../context.js';
import { CliError, EXIT } from '../errors.js';
import { fields, out, printJson, table } from '../output.js';
import type { CtxFactory } from './common.js';

interface Schedule {
  name: string;
  target: string;
  input?: unknown;
  cron?: string;
  timezone?: string;
  every?: string;
  overlap: string;
  catchup: string;
  late_after: string;
  paused: boolean;
  next_fire_at: string | null;
  last_fire_at: string | null;
  last_invocation_id: string | null;
  running: { invocation_id: string; fire_at: string } | null;
  last_outcome: { status: string; invocation_id: string | null; fire_at: string | null; ended_at: string | null; failure?: { code: number; message: string } } | null;
  fired: number;
  skipped: number;
  queued: string[];
  created_at: string;
}

const path = (name: string) => `/schedules/${encodeURIComponent(name)}`;
const when = (s: Schedule) => (s.cron !== undefined ? `cron ${s.cron} (${s.timezone})` : `every ${s.every}`);

async function list(ctx: Ctx): Promise<void> {
  const { schedules } = await ctx.admin.call<{ schedules: Schedule[] }>('GET', '/schedules');
  if (ctx.json) return printJson(schedules);
  if (schedules.length === 0) {
    out(ctx.c.dim('No schedules. Create one with: keel schedules set <name> <target> --every 1h'));
    return;
  }
  const c = ctx.c;
  out(
    table(
      ['NAME', 'TARGET', 'WHEN', 'NEXT', 'LAST', 'OUTCOME', 'FIRED', 'SKIPPED'],
      schedules.map((s) => [
        s.name, s.target, when(s), s.paused ? c.yellow('paused') : (s.next_fire_at ?? '-'), s.last_fire_at ?? '-',
        s.last_outcome === null ? '-' : s.last_outcome.status === 'failed' ? c.red('failed') : c.green('succeeded'), s.fired, s.skipped,
      ]),
      c,
    ),
  );
}

function show(ctx: Ctx, s: Schedule): void {
  if (ctx.json) return printJson(s);
  const c = ctx.c;
  const o = s.last_outcome;
  out(
    fields(
      [
        ['Name', c.bold(s.name)],
        ['Target', s.target],
        ['Input', s.input === undefined ? undefined : JSON.stringify(s.input)],
        ['When', when(s)],
        ['Overlap', s.overlap],
        ['Catch-up', `${s.catchup} (a firing more than ${s.late_after} late is missed)`],
        ['State', s.paused ? c.yellow('paused') : 'active'],
        ['Next firing', s.next_fire_at ?? undefined],
        ['Last firing', s.last_fire_at ? `${s.last_fire_at} (${s.last_invocation_id})` : undefined],
        ['Running', s.running ? `${s.running.invocation_id} (for ${s.running.fire_at})` : undefined],
        ['Last outcome', o ? `${o.status === 'failed' ? c.red('failed') : c.green('succeeded')}${o.failure ? ` [${o.failure.code}] ${o.failure.message}` : ''}${o.ended_at ? ` at ${o.ended_at}` : ''}` : undefined],
        ['Fired / skipped', `${s.fired} / ${s.skipped}`],
        ['Queued', s.queued.length > 0 ? s.queued.join(', ') : undefined],
        ['Created', s.created_at],
      ],
      c,
    ),
  );
}

interface SetOptions {
  cron?: string;
  timezone?: string;
  every?: string;
  input?: string;
  overlap?: string;
  catchup?: string;
  lateAfter?: string;
  paused?: boolean;
}

async function set(ctx: Ctx, name: string, target: string, o: SetOptions): Promise<void> {
  let input: unknown;
  if (o.input !== undefined) {
    try {
      input = JSON.parse(o.input);
    } catch {
      throw new CliError(`--input is not JSON: ${o.input.slice(0, 60)}`, EXIT.USAGE);
    }
  }
  const body = {
    target, ...(o.cron !== undefined ? { cron: o.cron } : {}), ...(o.timezone !== undefined ? { timezone: o.timezone } : {}),
    ...(o.every !== undefined ? { every: o.every } : {}), ...(input !== undefined ? { input } : {}),
    ...(o.overlap !== undefined ? { overlap: o.overlap } : {}), ...(o.catchup !== undefined ? { catchup: o.catchup } : {}),
    ...(o.lateAfter !== undefined ? { late_after: o.lateAfter } : {}), ...(o.paused ? { paused: true } : {}),
  };
  show(ctx, await ctx.admin.call<Schedule>('PUT', path(name), body));
}

export function schedulesCommand(program: Command, ctxOf: CtxFactory): void {
  const cmd = program.command('schedules').alias('sched').description('cron and interval schedules that invoke a handler');
  cmd.command('list').alias('ls').description('list the schedules: next and last firing, last outcome').action(async (_o: unknown, c: Command) => list(ctxOf(c)));
  cmd.command('describe')
    .alias('get')
    .argument('<name>', 'schedule name')
    .description('show a schedule')
    .action(async (name: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      show(ctx, await ctx.admin.call<Schedule>('GET', path(name)));
    });
  cmd.command('set')
    .argument('<name>', 'schedule name ([A-Za-z0-9_.-], up to 128)')
    .argument('<target>', 'Service/handler, or Object/key/handler (a workflow: Workflow/id-prefix/run)')
    .option('--cron <expr>', 'cron expression, 5 fields or 6 with seconds first ("0 9 * * MON-FRI")')
    .option('--timezone <tz>', 'IANA time zone of the cron expression (default UTC)')
    .option('--every <duration>', 'fixed interval instead of cron ("30s", "1h 30m")')
    .option('--input <json>', 'JSON input of each firing')
    .option('--overlap <policy>', 'while a firing runs: skip (default), buffer_one, allow_all, cancel_other')
    .option('--catchup <policy>', 'firings missed while the server was down: one (default), all, skip')
    .option('--late-after <duration>', 'how late a firing may start before it counts as missed (default 1m)')
    .option('--paused', 'create it paused')
    .description('create or replace a schedule')
    .action(async (name: string, target: string, o: SetOptions, c: Command) => set(ctxOf(c), name, target, o));
  for (const [action, what] of [['pause', 'stop firing until resumed'], ['resume', 'fire again from the next time'], ['trigger', 'fire once now (the overlap policy applies)']] as const) {
    cmd.command(action)
      .argument('<name>', 'schedule name')
      .description(what)
      .action(async (name: string, _o: unknown, c: Command) => {
        const ctx = ctxOf(c);
        const s = await ctx.admin.call<Schedule & { triggered?: boolean }>('POST', `${path(name)}/${action}`);
        show(ctx, s);
        if (!ctx.json && s.triggered === false) out(ctx.c.yellow(`Not fired now: a firing runs, and the overlap policy ${s.overlap} ${s.overlap === 'skip' ? 'skipped it' : 'keeps it waiting'}.`));
      });
  }
  cmd.command('delete')
    .alias('rm')
    .argument('<name>', 'schedule name')
    .description('delete a schedule (a firing that runs goes on)')
    .action(async (name: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      await ctx.confirm(`Delete schedule ${name}?`);
      const r = await ctx.admin.call<{ name: string; deleted: boolean }>('DELETE', path(name));
      if (ctx.json) return printJson(r);
      out(`Deleted schedule ${name}.`);
    });
}
