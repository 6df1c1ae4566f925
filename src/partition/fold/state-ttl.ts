import type { ExpireState, StateTtls } from '../../log/commands.js';
import type { StateTtl } from '../../storage/tables/state-ttl.js';
import { splitObjectKey } from '../state.js';
import type { FoldContext } from './context.js';

/**
 * The state TTLs changed: the new book replaces the partition's. A service that had a TTL keeps
 * the time it got it (so a shorter TTL applies at once to what is old); one new to the book
 * gets the log's time now: what it stored before counts from there.
 */
export function foldStateTtls(ctx: FoldContext, cmd: StateTtls): void {
  const next: StateTtl[] = [];
  for (const e of cmd.services ?? []) {
    if (!e.service || !e.ttl_ms) continue;
    const before = ctx.state.ttl.of(e.service);
    next.push({ service: e.service, ttl_ms: e.ttl_ms, on_access: e.on_access ?? false, since_ms: before?.since_ms ?? ctx.now_ms });
  }
  ctx.state.ttl.setBook(next, true);
}

/**
 * The cleaner saw an object whose state TTL looked over. Checked again at the log's time: a
 * write or an access since, or an invocation holding the key, keeps the state (the cleaner asks
 * again at a later run); otherwise every state key of the object goes.
 */
export function foldExpireState(ctx: FoldContext, cmd: ExpireState): void {
  const objectKey = cmd.object_key ?? '';
  if (objectKey === '') return;
  const { service } = splitObjectKey(objectKey);
  const due = ctx.state.ttl.expiresAt(service, objectKey);
  if (due === undefined) {
    ctx.state.ttl.forget(service, objectKey);
    return;
  }
  if (due > ctx.now_ms || ctx.state.lockOf(objectKey) !== undefined) return;
  ctx.state.clearState(objectKey);
  ctx.state.ttl.forget(service, objectKey);
}
