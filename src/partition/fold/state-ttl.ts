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
    // A TTL the admin API would refuse changes nothing (a bad command must not stop the partition).
    const ttl_ms = e.ttl_ms ?? 0;
    if (!e.service || !Number.isSafeInteger(ttl_ms) || ttl_ms <= 0) continue;
    const before = ctx.state.ttl.of(e.service);
    next.push({ service: e.service, ttl_ms, on_access: e.on_access ?? false, since_ms: before?.since_ms ?? ctx.now_ms });
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
  if (due > ctx.now_ms) return;
  if (ctx.state.lockOf(objectKey) !== undefined) {
    // Held: kept. One found by the cleaner's sweep (never touched since the TTL was set) is
    // indexed now, at the TTL's start, so that a later run finds it again.
    const ttl = ctx.state.ttl.of(service)!;
    if (ctx.state.ttl.touchedAt(objectKey) === undefined) ctx.state.ttl.touch(service, objectKey, ttl.since_ms, 'write');
    return;
  }
  ctx.state.clearState(objectKey);
  ctx.state.ttl.forget(service, objectKey);
}
