// Flow control at the ingress: the scope of `/restate/scope/{scope}/call|send/...` and the limit
// key of `x-restate-limit-key` (or `?limit-key=`; the header wins), checked in Restate 1.7's
// order and with its messages, so a client sees the same 400s from both servers.
import type { IncomingHttpHeaders } from 'node:http';
import { parseLimitKey, restrictedValueError } from '../common/limit-rules.js';
import { MAX_PRIORITY } from '../storage/tables/vqueues.js';

export const LIMIT_KEY_HEADER = 'x-restate-limit-key';
/** Keel's own: 0 (the default) to MAX_PRIORITY; waiting for a slot of its scope, a higher one goes first. */
export const PRIORITY_HEADER = 'x-keel-priority';

export interface FlowTarget {
  scope?: string;
  limit_key?: string;
  priority?: number;
}

/**
 * The scope, limit key and priority of a request, or the message of why they are refused (400
 * KEEL0901). `scope` is the decoded path segment, undefined on the unscoped paths.
 */
export function flowOf(scope: string | undefined, headers: IncomingHttpHeaders, query: URLSearchParams): FlowTarget | { error: string } {
  if (scope !== undefined) {
    const bad = restrictedValueError(scope);
    if (bad !== undefined) return { error: `bad scope value: ${bad}` };
  }
  const priority = priorityOf(headers[PRIORITY_HEADER]);
  if (typeof priority === 'string') return { error: priority };
  if (priority !== undefined && scope === undefined) return { error: `${PRIORITY_HEADER} requires a scope to be set` };
  const withPriority = priority ? { priority } : {};
  const text = limitKeyText(headers, query);
  if (text === undefined) return scope === undefined ? {} : { scope, ...withPriority };
  const levels = parseLimitKey(text);
  if (!Array.isArray(levels)) return { error: `invalid limit-key: ${levels.error}` };
  if (levels.length === 0) return scope === undefined ? {} : { scope, ...withPriority };
  if (scope === undefined) return { error: 'limit-key requires a scope to be set' };
  return { scope, limit_key: levels.join('/'), ...withPriority };
}

function priorityOf(h: string | string[] | undefined): number | string | undefined {
  if (h === undefined) return undefined;
  const text = Array.isArray(h) ? h[0]! : h;
  if (!/^\d$/.test(text.trim())) return `invalid ${PRIORITY_HEADER}: '${text.slice(0, 20)}' is not an integer from 0 to ${MAX_PRIORITY}`;
  return Number(text.trim());
}

function limitKeyText(headers: IncomingHttpHeaders, query: URLSearchParams): string | undefined {
  const h = headers[LIMIT_KEY_HEADER];
  if (h !== undefined) return Array.isArray(h) ? h[0] : h;
  for (const [name, value] of query) if (name.toLowerCase() === 'limit-key') return value;
  return undefined;
}
