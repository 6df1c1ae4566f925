import type { ModifyState } from '../../log/commands.js';
import { objectKeyOf } from '../state.js';
import { stateVersion } from '../state-version.js';
import type { FoldContext } from './context.js';

/**
 * An operator's new state for one key replaces the old one. Skipped while an invocation holds
 * the key (it may be reading or writing that state), and when the state is no longer the one
 * `version` was computed over (someone changed it meanwhile): nothing is lost silently.
 */
export function foldModifyState(ctx: FoldContext, cmd: ModifyState): void {
  const objectKey = objectKeyOf(cmd.service ?? '', cmd.key ?? '');
  if (ctx.state.lockOf(objectKey) !== undefined) return;
  if (cmd.version) {
    const current = [...ctx.state.stateOf(objectKey)].map(([k, v]): [string, Buffer] => [Buffer.from(k, 'base64url').toString('utf8'), v]);
    if (stateVersion(current) !== cmd.version) return;
  }
  ctx.state.clearState(objectKey);
  for (const e of cmd.entries ?? []) ctx.state.setState(objectKey, (e.key ?? Buffer.alloc(0)).toString('base64url'), e.value ?? Buffer.alloc(0));
  ctx.state.ttl.touch(cmd.service ?? '', objectKey, ctx.now_ms, 'write');
}
