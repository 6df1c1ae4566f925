// Fixtures for testing the partition fold without a server: a partition state over an
// in-memory store, command builders, and matchers for the actions a fold asks for.
import { PartitionState } from '../../dist/partition/state.js';
import { outboxTable } from '../../dist/storage/tables/outbox.js';
import { fold } from '../../dist/partition/fold/index.js';
import { decodeCommand, Outcome, Then, TimerKind, ManageAction } from '../../dist/log/commands.js';
import { MessageType, encode, decode, pb } from '../../dist/protocol/messages.js';
import { InvocationId, objectPartitionKey, randomPartitionKey } from '../../dist/common/ids.js';

export { MessageType, Outcome, Then, TimerKind, ManageAction, encode, decode, pb, InvocationId };

/**
 * A partition whose writes land in a Map. `apply(cmd)` folds one command at the next
 * millisecond and returns the actions it asked for. `stateCacheBytes`: the object state it
 * keeps in memory (its default when undefined).
 */
export function partition(number = 0, stateCacheBytes = undefined, limits = undefined) {
  const store = new Map();
  const state = new PartitionState(number, stateCacheBytes, limits);
  state.loader = (key) => store.get(key);
  let now = 1_000_000;
  return {
    state,
    store,
    get now() {
      return now;
    },
    apply(cmd, at = ++now) {
      now = Math.max(now, at);
      const actions = [];
      fold({ state, actions, now_ms: at }, { timestamp_ms: at, ...cmd });
      for (const [k, v] of state.takeWrites()) v === null ? store.delete(k) : store.set(k, v);
      return actions;
    },
    status: (id) => state.status(id.text ?? id),
    journal: (id) => state.journal(id.text ?? id),
  };
}

export const serviceId = () => InvocationId.random(randomPartitionKey());
export const objectId = (service, key) => InvocationId.random(objectPartitionKey(service, key));

export function invoke(id, fields = {}) {
  return {
    kind: 'invoke',
    invoke: { invocation_id: id.bytes, service: 'Svc', handler: 'h', key: '', input: Buffer.from('"in"'), service_type: 'Service', handler_type: '', ...fields },
  };
}

export function objectInvoke(id, key, fields = {}) {
  return invoke(id, { service: 'Obj', key, service_type: 'VirtualObject', handler_type: 'Exclusive', ...fields });
}

export function append(id, epoch, type, message, fields = {}) {
  return { kind: 'journal_append', journal_append: { invocation_id: id.bytes, epoch, entry_type: type, entry: Buffer.from(message), ...fields } };
}

export const output = (value) => encode(pb.Output, { value: { content: Buffer.from(JSON.stringify(value)) } });

export function ended(id, epoch, outcome, fields = {}) {
  return { kind: 'attempt_ended', attempt_ended: { invocation_id: id.bytes, epoch, outcome, ...fields } };
}

/** Completes the current attempt of `id` with `value`. */
export function completeWith(p, id, value) {
  const s = p.status(id);
  p.apply(append(id, s.epoch, MessageType.OutputCommand, output(value)));
  return p.apply(ended(id, s.epoch, Outcome.END));
}

export const kinds = (actions) => actions.map((a) => a.kind);
export const find = (actions, kind) => actions.filter((a) => a.kind === kind);

/** The entries this partition's outbox holds for others (in its store), in sequence order. */
export function outboxEntries(p) {
  const prefix = `p${p.state.partition}/s/outbox/`;
  return [...p.store.keys()].filter((k) => k.startsWith(prefix)).sort().map((k) => outboxTable.decode(p.state.partition, k, p.store.get(k)));
}

/** The commands this partition's outbox holds for others, decoded, in order. */
export function outbox(p) {
  return outboxEntries(p).map((e) => ({ target: e.target, ...decodeCommand(e.command) }));
}

/** The notification journalled last for `id`, decoded. */
export function lastNotification(p, id) {
  const j = p.journal(id);
  const e = j[j.length - 1];
  return { type: e.type, ...decode(pb.Notification, e.payload) };
}
