// keel sql "<query>"

import type { Command } from 'commander';
import type { Row } from '../admin.js';
import type { Ctx } from '../context.js';
import { usage } from '../errors.js';
import { out, printJson, table } from '../output.js';
import type { CtxFactory } from './common.js';

/** Columns in order of first appearance (the JSON answer leaves null columns out of a row). */
export function columnsOf(rows: Row[]): string[] {
  const seen = new Set<string>();
  for (const r of rows) for (const k of Object.keys(r)) seen.add(k);
  return [...seen];
}

function cell(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

async function sql(ctx: Ctx, query: string): Promise<void> {
  if (query.trim() === '') throw usage('sql: the query is empty');
  const started = Date.now();
  const rows = await ctx.admin.query(query);
  if (ctx.json) {
    printJson(rows);
    return;
  }
  const cols = columnsOf(rows);
  if (rows.length > 0) out(table(cols, rows.map((r) => cols.map((c) => cell(r[c]))), ctx.c));
  out(ctx.c.dim(`${rows.length} row${rows.length === 1 ? '' : 's'} (${Date.now() - started} ms)`));
}

export function sqlCommand(program: Command, ctxOf: CtxFactory): void {
  program
    .command('sql')
    .argument('<query>', 'SQL over sys_invocation, sys_journal, state, sys_service, sys_deployment, sys_inbox, …')
    .description('run a SQL query on the admin API and print the rows')
    .action(async (query: string, _o: unknown, cmd: Command) => sql(ctxOf(cmd), query));
}
