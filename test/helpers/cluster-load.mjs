// Load on a cluster while something fails: counter adds, each with its own idempotency key,
// through the nodes in turn, and the waits between their answers.
import { eventually } from './keel.mjs';

/**
 * Adds 1 to Counter/`key` through `nodes` in turn until `stop` is set; `call` retries until an
 * answer other than 503 comes. `answered`: the answers' times. An add answered other than 200
 * while not stopping fails the load (`done` rejects).
 */
export function loadOn(call, key, nodes) {
  const state = { stop: false, answered: [], done: undefined };
  state.done = (async () => {
    for (let i = 0; !state.stop; i++) {
      const res = await call(nodes[i % nodes.length], `/Counter/${key}/add`, 1, { 'idempotency-key': `${key}-${i}` });
      if (res.status === 200) state.answered.push(performance.now());
      else if (!state.stop) throw new Error(`add ${key}-${i}: ${res.status} ${JSON.stringify(res.body)}`);
    }
  })();
  return state;
}

/** The longest wait for an answer from the last one before `from` until `to`. */
export function longestGap(answered, from, to = performance.now()) {
  const points = [answered.filter((at) => at <= from).at(-1) ?? from, ...answered.filter((at) => at > from && at <= to), to];
  let gap = 0;
  for (let i = 1; i < points.length; i++) gap = Math.max(gap, points[i] - points[i - 1]);
  return gap;
}

/** Resolves once `count` answers came after `from`. */
export const resumed = (load, from, count = 5) => eventually(() => load.answered.filter((at) => at > from).length >= count, { timeout_ms: 30_000 });

/** Rebuilds `partitions` of the cluster log `client` reads into a fresh store under `dir` (from the newest snapshot where the log is trimmed); returns the store. */
export async function rebuildFromLog(client, dir, partitions) {
  const { openWorkerStore } = await import('../../dist/storage/store.js');
  const { GroupWriter } = await import('../../dist/storage/group-writer.js');
  const { KafkaLog } = await import('../../dist/log/kafka-log.js');
  const { foldRead } = await import('../../dist/partition/catch-up.js');
  const { loadState } = await import('../../dist/partition/recovery.js');
  const rebuilt = await openWorkerStore(dir);
  const writer = new GroupWriter(rebuilt);
  for (const p of partitions) {
    const log = await KafkaLog.open(rebuilt, p, writer, client);
    await foldRead(log, log.readNew(), await loadState(rebuilt, p));
  }
  return rebuilt;
}

/** Every key of `partitions` in `db` (state, statuses, journals…), as hex, by key. */
export async function partitionKeys(db, partitions) {
  const { statePrefix } = await import('../../dist/storage/keys.js');
  const out = {};
  for (const p of partitions) {
    for await (const [k, v] of db.iterator({ gte: statePrefix(p), lt: `${statePrefix(p)}~` })) out[k] = v.toString('hex');
  }
  return out;
}
