// A fake IntrospectionSource (what the partitions will provide) and an admin server backed by it
// plus a real registry with Greeter (service) and Counter (virtual object) registered.
import { InvocationId, randomPartitionKey } from '../../dist/common/ids.js';
import { Registry } from '../../dist/metadata/registry.js';
import { createAdminServer } from '../../dist/admin/server.js';
import { unknownInvocation } from '../../dist/admin/introspection.js';
import { KeelError } from '../../dist/errors/index.js';
import { silentLogger } from '../../dist/common/logger.js';
import { MessageType, encode, pb } from '../../dist/protocol/messages.js';
import { tempDir, testConfig, serveH2, greeter, counter } from './meta-helpers.mjs';

export const newId = () => InvocationId.random(randomPartitionKey()).text;

export function fakeSource(deploymentId) {
  const t0 = Date.parse('2026-11-22T04:51:18.000Z');
  const ids = { running: newId(), backingOff: newId(), completed: newId(), failed: newId(), suspended: newId(), inboxed: newId(), scheduled: newId(), counterRunning: newId() };
  const invocations = new Map();
  const add = (s) => invocations.set(s.id, { epoch: 0, journal_length: 0, retry_count: 0, modified_at_ms: s.created_at_ms, ...s });
  add({ id: ids.running, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'running', created_at_ms: t0 + 10, deployment_id: deploymentId, sdk_version: 'restate-sdk-typescript/1.17.2', last_start_at_ms: t0 + 11, journal_length: 2, idempotency_key: 'idem-1' });
  add({ id: ids.backingOff, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'backing-off', created_at_ms: t0 + 20, deployment_id: deploymentId, retry_count: 8, next_retry_at_ms: t0 + 9000, last_start_at_ms: t0 + 8000,
    last_failure: { error_code: 'RT0007', failure_code: 500, message: 'boom', related_entry_index: 1, related_entry_name: 'step', related_entry_type: 0x0411 } });
  add({ id: ids.completed, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'completed', created_at_ms: t0 + 1, completed_at_ms: t0 + 5, deployment_id: deploymentId, result: { value: Buffer.from('"hi"').toString('base64') } });
  add({ id: ids.failed, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'completed', created_at_ms: t0 + 2, completed_at_ms: t0 + 6, result: { failure: { code: 500, message: 'nope' } } });
  add({ id: ids.suspended, service: 'Counter', handler: 'add', key: 'c1', service_type: 'VirtualObject', status: 'suspended', created_at_ms: t0 + 30, deployment_id: deploymentId, journal_length: 2 });
  add({ id: ids.inboxed, service: 'Counter', handler: 'add', key: 'c1', service_type: 'VirtualObject', status: 'inboxed', created_at_ms: t0 + 40, inboxed_at_ms: t0 + 40 });
  add({ id: ids.scheduled, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'scheduled', created_at_ms: t0 + 50, scheduled_at_ms: t0 + 60000, caller_id: ids.running, caller_target: 'Greeter/greet' });
  add({ id: ids.counterRunning, service: 'Counter', handler: 'add', key: 'c2', service_type: 'VirtualObject', status: 'running', created_at_ms: t0 + 35, deployment_id: deploymentId });
  const state = new Map([['Counter/c1', new Map([['count', Buffer.from('5')], ['label', Buffer.from('"hello"')]])]]);
  const calls = [];
  // The query engine keeps a copy of the statuses: it starts from invocationLines and follows changes.
  const listeners = new Set();
  const record = (s) => Buffer.from(JSON.stringify(s));
  const changed = (id) => {
    const s = invocations.get(id);
    for (const l of listeners) l([[id, s ? record(s) : null]]);
  };
  const source = {
    ids,
    calls,
    stateMap: state,
    /** Adds or replaces a status and tells the engine, as a durable batch would. */
    put: (s) => {
      add(s);
      changed(s.id);
    },
    invocationLines: async function* () {
      yield Buffer.concat([...invocations.values()].flatMap((s) => [record(s), Buffer.from('\n')]));
    },
    watchInvocations: (listener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    unfinishedPinnedTo: (deploymentId) => [...invocations.values()].filter((s) => s.deployment_id === deploymentId && s.status !== 'completed').length,
    journalEntries: async (id) => {
      if (!invocations.has(id)) return [];
      return [
        { type: MessageType.InputCommand, payload: encode(pb.Input, { headers: [], value: { content: Buffer.from('{}') } }) },
        { type: MessageType.SleepCommand, payload: encode(pb.Sleep, { wake_up_time: t0 + 100000, result_completion_id: 1, name: '' }) },
      ];
    },
    state: async function* () {
      for (const [sk, entries] of state) {
        const [service, key] = sk.split('/');
        for (const [state_key, value] of entries) yield { service, key, state_key, value };
      }
    },
    inbox: () => [{ service: 'Counter', key: 'c1', id: ids.inboxed, seq: 1, created_at_ms: t0 + 40 }],
    locks: () => [{ service: 'Counter', key: 'c1', id: ids.suspended }, { service: 'Counter', key: 'c2', id: ids.counterRunning }],
    promises: async function* () { yield { service: 'Signup', key: 'w1', name: 'p', completed: true, value: Buffer.from('1') }; },
    manage: async (id, action) => {
      calls.push([id, action]);
      const s = invocations.get(id);
      if (!s) throw unknownInvocation(id);
      if ((action === 'kill' || action === 'cancel') && s.status === 'completed') throw new KeelError('KEEL0008', `The invocation '${id}' was already completed.`);
      if (action === 'kill') { s.status = 'completed'; s.result = { failure: { code: 409, message: 'killed' } }; changed(id); return { status: 200 }; }
      if (action === 'cancel') return { status: 202 };
      if (action === 'purge') { invocations.delete(id); changed(id); return { status: 200 }; }
      if (action === 'pause') return { status: 202 };
      if (action === 'resume') return { status: 200 };
      return { status: 200, body: { new_invocation_id: newId() } };
    },
    setState: async (service, key, entries, version) => {
      calls.push(['setState', service, key, version]);
      state.set(`${service}/${key}`, entries);
    },
  };
  return source;
}

/** An admin server over the fake source; `queryEngine` overrides admin.query_engine settings, `baseDir` where its engine's files go. */
export async function startAdmin(t, { queryEngine = {}, baseDir } = {}) {
  const config = testConfig(tempDir(t));
  if (baseDir !== undefined) config.base_dir = baseDir;
  Object.assign(config.admin.query_engine, queryEngine);
  const registry = await Registry.open(config, silentLogger);
  const uri = await serveH2(t, [greeter, counter]);
  const { deployment } = await registry.register({ uri });
  const source = fakeSource(deployment.id);
  const app = await createAdminServer({ config, registry, logger: silentLogger, introspection: source });
  await app.listen({ host: '127.0.0.1', port: 0 });
  let closing;
  const close = () => (closing ??= (async () => { await app.close(); await registry.close(); })());
  t.teardown(close);
  const base = `http://127.0.0.1:${app.server.address().port}`;
  return { base, source, registry, deploymentId: deployment.id, close };
}
