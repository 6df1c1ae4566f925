// keel state get|set — the state of one virtual object or workflow key, as `restate state`
// reads and writes it: SQL on the `state` table, then POST /services/{name}/state with the
// whole new state and the version (a hash) of the state it was computed from.

import { createHash } from 'node:crypto';
import type { Command } from 'commander';
import type { Ctx } from '../context.js';
import { CliError, EXIT, notFound, usage } from '../errors.js';
import { out, printJson, table } from '../output.js';
import { lit } from '../sql.js';
import type { CtxFactory } from './common.js';

/**
 * The `version` the admin API compares with the current state before applying a change:
 * base64url (no padding) of SHA-256 over the entries sorted by key, each hashed as
 * u64_be(position) 0x01 key 0x02 value 0x03.
 */
export function stateVersion(entries: Map<string, Buffer>): string {
  const sorted = [...entries].sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const h = createHash('sha256');
  sorted.forEach(([k, v], i) => {
    const idx = Buffer.alloc(8);
    idx.writeBigUInt64BE(BigInt(i));
    h.update(idx).update(Buffer.from([1])).update(k).update(Buffer.from([2])).update(v).update(Buffer.from([3]));
  });
  return h.digest('base64url');
}

/** A stored value for people and for JSON: parsed JSON when it is, else text, else hex. */
export function decodeValue(bytes: Buffer): { value: unknown; text: string } {
  const s = bytes.toString('utf8');
  const utf8 = Buffer.from(s, 'utf8').equals(bytes);
  if (utf8) {
    try {
      return { value: JSON.parse(s), text: s };
    } catch {
      return { value: s, text: s };
    }
  }
  const hex = bytes.toString('hex');
  return { value: { hex }, text: `0x${hex}` };
}

async function checkKeyed(ctx: Ctx, service: string): Promise<string> {
  const s = await ctx.admin.call<{ name: string; ty: string }>('GET', `/services/${encodeURIComponent(service)}`);
  if (s.ty !== 'VirtualObject' && s.ty !== 'Workflow') {
    throw usage(`${s.name} is a ${s.ty}: only virtual objects and workflows have state`);
  }
  return s.name;
}

async function readState(ctx: Ctx, service: string, key: string): Promise<Map<string, Buffer>> {
  const rows = await ctx.admin.query(`SELECT key, value FROM state WHERE service_name = ${lit(service)} AND service_key = ${lit(key)} ORDER BY key`);
  const m = new Map<string, Buffer>();
  for (const r of rows) m.set(String(r.key), Buffer.from(typeof r.value === 'string' ? r.value : '', 'hex'));
  return m;
}

function render(ctx: Ctx, state: Map<string, Buffer>): void {
  if (ctx.json) {
    printJson(Object.fromEntries([...state].map(([k, v]) => [k, decodeValue(v).value])));
    return;
  }
  if (state.size === 0) {
    out(ctx.c.dim('(no state)'));
    return;
  }
  out(table(['KEY', 'VALUE'], [...state].map(([k, v]) => [k, decodeValue(v).text]), ctx.c));
}

async function get(ctx: Ctx, service: string, key: string, name?: string): Promise<void> {
  const svc = await checkKeyed(ctx, service);
  const state = await readState(ctx, svc, key);
  if (name !== undefined) {
    const v = state.get(name);
    if (v === undefined) throw notFound(`${svc}/${key} has no state entry '${name}'`);
    if (ctx.json) printJson(decodeValue(v).value);
    else out(decodeValue(v).text);
    return;
  }
  render(ctx, state);
}

async function set(ctx: Ctx, service: string, key: string, name: string, value: string | undefined, o: { unset?: boolean; raw?: boolean }): Promise<void> {
  if (o.unset && value !== undefined) throw usage('state set --unset takes no value');
  if (!o.unset && value === undefined) throw usage('state set: give a value (JSON, e.g. 5, \'"text"\', \'{"a":1}\'), or --unset');
  let bytes: Buffer | undefined;
  if (value !== undefined) {
    if (o.raw) bytes = Buffer.from(value, 'utf8');
    else {
      try {
        bytes = Buffer.from(JSON.stringify(JSON.parse(value)), 'utf8');
      } catch {
        throw usage(`state set: '${value}' is not JSON; quote text as '"${value}"', or pass --raw to store the bytes as given`);
      }
    }
  }
  const svc = await checkKeyed(ctx, service);
  const before = await readState(ctx, svc, key);
  const version = stateVersion(before);
  const after = new Map(before);
  if (o.unset) {
    if (!after.delete(name)) throw notFound(`${svc}/${key} has no state entry '${name}'`);
  } else after.set(name, bytes!);

  if (!ctx.json) {
    const old = before.get(name);
    out(`${ctx.c.bold(`${svc}/${key}`)} ${name}: ${old === undefined ? ctx.c.dim('(unset)') : decodeValue(old).text} → ${bytes === undefined ? ctx.c.dim('(unset)') : ctx.c.yellow(decodeValue(bytes).text)}`);
  }
  await ctx.confirm(`${o.unset ? 'Remove' : 'Set'} state '${name}' of ${svc}/${key}?`);
  await ctx.admin.call('POST', `/services/${encodeURIComponent(svc)}/state`, {
    version,
    object_key: key,
    new_state: Object.fromEntries([...after].map(([k, v]) => [k, [...v]])),
  });
  // The admin API accepts a stale version silently (202, nothing changed): read back to tell.
  const want = stateVersion(after);
  let now = await readState(ctx, svc, key);
  for (let i = 0; i < 20 && stateVersion(now) !== want; i++) {
    await new Promise((r) => setTimeout(r, 100));
    now = await readState(ctx, svc, key);
  }
  if (stateVersion(now) !== want) {
    throw new CliError(`the state of ${svc}/${key} changed while it was being written, so nothing was changed`, EXIT.SERVER, { hint: 'run the command again' });
  }
  if (ctx.json) printJson(Object.fromEntries([...now].map(([k, v]) => [k, decodeValue(v).value])));
  else out(`${ctx.c.green(o.unset ? 'Removed' : 'Set')} ${name} of ${svc}/${key}.`);
}

export function stateCommand(program: Command, ctxOf: CtxFactory): void {
  const st = program.command('state').description('read and change the state of a virtual object or workflow');
  st.command('get')
    .argument('<service>', 'virtual object or workflow')
    .argument('<key>', 'object/workflow key')
    .argument('[name]', 'one state entry (prints its value only)')
    .description('print the state of one key (values shown as JSON when they are)')
    .action(async (service: string, key: string, name: string | undefined, _o: unknown, cmd: Command) => get(ctxOf(cmd), service, key, name));
  st.command('set')
    .argument('<service>', 'virtual object or workflow')
    .argument('<key>', 'object/workflow key')
    .argument('<name>', 'state entry')
    .argument('[value]', 'new value, as JSON (5, \'"text"\', \'{"a":1}\')')
    .option('--unset', 'remove the entry')
    .option('--raw', 'store the value as given (UTF-8 bytes), not as JSON')
    .description('set (or --unset) one state entry of one key; asks first')
    .action(async (service: string, key: string, name: string, value: string | undefined, o: { unset?: boolean; raw?: boolean }, cmd: Command) =>
      set(ctxOf(cmd), service, key, name, value, o),
    );
}
