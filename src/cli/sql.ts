// The SQL the CLI sends: plain standard SQL (string literals, =, <>, IN, AND, COUNT(*),
// ORDER BY, LIMIT), nothing engine-specific, so that it runs on any engine behind /query.
// Timestamps are compared with RFC 3339 literals, the form the admin API returns them in.

import { parseDuration_ms } from '../common/units.js';
import { usage } from './errors.js';

/** A string literal: single quotes, quotes inside doubled. */
export function lit(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}

export function inList(column: string, values: string[]): string {
  return values.length === 1 ? `${column} = ${lit(values[0]!)}` : `${column} IN (${values.map(lit).join(', ')})`;
}

/** `sys_invocation.status` values (the derived vocabulary). */
export const STATUSES = ['pending', 'scheduled', 'ready', 'running', 'backing-off', 'suspended', 'paused', 'completed'] as const;

export interface InvocationFilter {
  service?: string[];
  handler?: string[];
  key?: string[];
  status?: string[];
  /** created at least this long ago */
  olderThan?: string;
  /** created at most this long ago */
  newerThan?: string;
  failureCode?: string[];
  deployment?: string[];
  /** include completed invocations (listing only) */
  all?: boolean;
}

/** Comma-separated and repeated values of an option, flattened. */
export function listOption(value: string, previous: string[] | undefined): string[] {
  const more = value
    .split(',')
    .map((v) => v.trim())
    .filter((v) => v !== '');
  return [...(previous ?? []), ...more];
}

export function durationOption(flag: string, text: string): number {
  const ms = parseDuration_ms(text);
  if (ms === undefined) throw usage(`${flag}: '${text}' is not a duration (e.g. 30s, 5m, 2h, 1d, 1h30m)`);
  return ms;
}

/** The conditions of a filter, ANDed by the caller; validates the values. */
export function filterConditions(f: InvocationFilter, now = Date.now()): string[] {
  const where: string[] = [];
  if (f.service?.length) where.push(inList('target_service_name', f.service));
  if (f.handler?.length) where.push(inList('target_handler_name', f.handler));
  if (f.key?.length) where.push(inList('target_service_key', f.key));
  if (f.status?.length) {
    for (const s of f.status) {
      if (!(STATUSES as readonly string[]).includes(s)) throw usage(`--status: unknown status '${s}' (one of ${STATUSES.join(', ')})`);
    }
    where.push(inList('status', f.status));
  }
  if (f.olderThan !== undefined) where.push(`created_at <= ${lit(new Date(now - durationOption('--older-than', f.olderThan)).toISOString())}`);
  if (f.newerThan !== undefined) where.push(`created_at >= ${lit(new Date(now - durationOption('--newer-than', f.newerThan)).toISOString())}`);
  if (f.failureCode?.length) {
    // RT/META codes are the last failure of a retrying invocation; a number is the code of a
    // completed invocation's terminal failure, which the admin API renders as "[code] message".
    const alternatives = f.failureCode.map((code) => {
      if (/^\d+$/.test(code)) return `completion_failure LIKE ${lit(`[${code}]%`)}`;
      if (!/^[A-Za-z]+\d+$/.test(code)) throw usage(`--failure-code: '${code}' is neither an error code (RT0016) nor a number (500)`);
      return `last_failure_error_code = ${lit(code.toUpperCase())}`;
    });
    where.push(alternatives.length === 1 ? alternatives[0]! : `(${alternatives.join(' OR ')})`);
  }
  if (f.deployment?.length) {
    where.push(`(${inList('pinned_deployment_id', f.deployment)} OR ${inList('last_attempt_deployment_id', f.deployment)})`);
  }
  return where;
}

export function whereSql(conditions: string[]): string {
  return conditions.length === 0 ? '' : ` WHERE ${conditions.join(' AND ')}`;
}
