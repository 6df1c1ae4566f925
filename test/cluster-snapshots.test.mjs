// Snapshots and log trimming in a cluster, on a real Apache Kafka cluster (3 brokers, KRaft, on
// loopback) and a snapshot directory the nodes share: the active node snapshots each partition
// every 25 records and trims the Kafka log below the oldest of the 2 kept; a node with an empty
// disk starts from the newest snapshot (the log no longer holds the start), restores again when
// it was paused while the log was trimmed past it, and takes over after a SIGKILL with every
// object's state and every completed call intact; a rebuild from snapshot + log equals the
// leader's store.
import t from 'tap';
import path from 'node:path';
import { startKafkaCluster } from './helpers/kafka-cluster.mjs';
import { partitionKeys, rebuildFromLog } from './helpers/cluster-load.mjs';
import { counter, stepRuns, steps } from './services/cluster-services.mjs';
import { startKeel, serveServices, register, ingress, eventually, tempDir, adminCall as admin } from './helpers/keel.mjs';
import { openWorkerStore } from '../dist/storage/store.js';
import { GroupWriter } from '../dist/storage/group-writer.js';
import { KafkaLog, KafkaLogClient } from '../dist/log/kafka-log.js';
import { DirectorySnapshotStore } from '../dist/storage/snapshots.js';
import { silentLogger } from '../dist/common/logger.js';

const kafka = await startKafkaCluster(t, { brokers: 3 });
const PARTITIONS = 2;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const endpoint = await serveServices(t, [steps, counter]);

function node(t, name, topic, snapshots) {
  return startKeel(t, {
    env: {
      KEEL_CLUSTER__BROKERS: kafka.brokers.join(','),
      KEEL_CLUSTER__NODE_NAME: name,
      KEEL_CLUSTER__LOG_TOPIC: topic,
      KEEL_CLUSTER__SESSION_TIMEOUT: '2s',
      // One node leads every partition (the snapshots of a spread cluster: cluster-spread.test.mjs).
      KEEL_CLUSTER__SPREAD_PARTITIONS: 'false',
      KEEL_CLUSTER__SNAPSHOT_PATH: snapshots,
      KEEL_CLUSTER__SNAPSHOT_INTERVAL_RECORDS: '25',
      KEEL_CLUSTER__SNAPSHOTS_KEPT: '2',
      KEEL_WORKER__PARTITIONS: String(PARTITIONS),
    },
  });
}

async function role(keel) {
  return (await admin(keel, 'GET', '/cluster')).json?.role;
}

/** The first offset each partition's log still holds (Kafka's log start offset). */
async function logStarts(client) {
  return Promise.all(Array.from({ length: PARTITIONS }, (_, p) => client.logStart(p)));
}

t.test('snapshots trim the log; a node with an empty disk starts from them and takes over with everything intact', async (t) => {
  const topic = 'keel-snapshots';
  const shared = tempDir(t);
  const a = await node(t, 'a', topic, shared);
  await eventually(async () => (await role(a)) === 'active', { timeout_ms: 30_000 });
  await register(a, endpoint);
  const client = new KafkaLogClient({ node: 'test', brokers: kafka.brokers, topic, partitions: PARTITIONS, replication_factor: 3, min_insync_replicas: 2, transactional: false, snapshots: new DirectorySnapshotStore(shared) }, silentLogger);
  t.teardown(() => client.close());

  // Calls on both partitions (each call is several log records), in two phases: a snapshot of
  // each partition after the first, a second after the second, and only then is the log trimmed.
  const store = new DirectorySnapshotStore(shared);
  const snapshotsOf = () => Promise.all(Array.from({ length: PARTITIONS }, (_, p) => store.list(p)));
  let sum = 0;
  const loadRound = async (round) => {
    const calls = await Promise.all(Array.from({ length: 10 }, (_, i) => ingress(a, '/Steps/run', { id: `s-${round}-${i}` }, { 'idempotency-key': `s-${round}-${i}` })));
    t.same(calls.map((c) => c.status), Array(10).fill(200));
    for (const key of ['k1', 'k2', 'k3']) {
      const res = await ingress(a, `/Counter/${key}/add`, round + 1);
      t.equal(res.status, 200);
    }
    sum += round + 1;
  };
  for (let round = 0; round < 8; round++) {
    await loadRound(round);
    if (round === 3) {
      await eventually(async () => (await snapshotsOf()).every((s) => s.length === 1), { timeout_ms: 30_000 });
      t.same(await logStarts(client), Array(PARTITIONS).fill(0), 'one snapshot each: the log is not trimmed yet (no spare)');
    }
  }
  await eventually(async () => (await snapshotsOf()).every((s) => s.length === 2), { timeout_ms: 30_000 });
  const snapshots = await snapshotsOf();
  await eventually(async () => (await logStarts(client)).every((s) => s > 0), { timeout_ms: 10_000 });
  const starts = await logStarts(client);
  t.comment(`snapshots at offsets ${JSON.stringify(snapshots.map((s) => s.map((x) => x.cursor.offset)))}; log starts ${starts}`);
  for (let p = 0; p < PARTITIONS; p++) {
    t.equal(starts[p], snapshots[p][0].cursor.offset, `partition ${p}: the log is trimmed below the older of its two snapshots`);
  }

  // A node with an empty disk: the log's start is gone, it must start from the snapshots.
  const b = await node(t, 'b', topic, shared);
  await eventually(async () => (await role(b)) === 'standby', { timeout_ms: 30_000 });
  // The partitions are restored one after the other: wait for both lines, not the first.
  const restoredOn = (keel) => [...new Set(keel.logs().split('\n').filter((l) => l.includes('partition restored from a snapshot')).map((l) => JSON.parse(l).partition))].sort();
  await eventually(() => restoredOn(b).length >= 2, { timeout_ms: 30_000 }).catch(() => {});
  t.same(restoredOn(b), [0, 1], 'b restored both partitions from snapshots');

  // b paused while a goes on: the log is trimmed past what b followed; resumed, b restores the
  // newest snapshot and follows on from it.
  await eventually(async () => (await admin(b, 'GET', '/cluster')).json.partitions.every((p) => p.lag_offsets === 0));
  const followed = (await admin(b, 'GET', '/cluster')).json.partitions.map((p) => p.applied_offset);
  b.proc.kill('SIGSTOP');
  // Two more snapshots of each partition past what b followed: load until the log is trimmed past it.
  const trimmedPast = async () => (await logStarts(client)).every((start, p) => start > followed[p]);
  let rounds = 8;
  while (!(await trimmedPast())) {
    if (rounds >= 40) throw new Error(`the log was not trimmed past what b followed after ${rounds} rounds`);
    await loadRound(rounds++);
    await sleep(500);
  }
  t.pass(`the log was trimmed past what b followed (${followed}; the log starts at ${await logStarts(client)})`);
  b.proc.kill('SIGCONT');
  await eventually(() => b.logs().includes('the log was trimmed past what this node followed'), { timeout_ms: 30_000 });
  await eventually(async () => (await admin(b, 'GET', '/cluster')).json.partitions.every((p) => p.lag_offsets === 0), { timeout_ms: 30_000 });
  t.pass('b restored the newest snapshots and caught up with the logs');

  const killedAt = Date.now();
  await a.kill('SIGKILL');
  await eventually(async () => (await role(b)) === 'active', { timeout_ms: 30_000 });
  t.comment(`b active ${Date.now() - killedAt} ms after a was SIGKILLed`);
  for (const key of ['k1', 'k2', 'k3']) {
    const res = await ingress(b, `/Counter/${key}/get`);
    t.same([res.status, res.body], [200, sum], `${key}: the fold of its ${rounds} adds`);
  }
  // Every call done on a answers on b, from state that came through a snapshot: none ran again.
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < 10; i++) {
      const again = await ingress(b, '/Steps/run', { id: `s-${round}-${i}` }, { 'idempotency-key': `s-${round}-${i}` });
      t.same([again.status, again.body], [200, `done s-${round}-${i}`]);
    }
  }
  t.ok([...stepRuns.values()].every((n) => n === 1) && stepRuns.size === rounds * 10, `each of the ${rounds * 10} steps ran once`);
  const more = await ingress(b, '/Counter/k1/add', 100);
  t.same([more.status, more.body], [200, sum + 100], 'b goes on from the restored state');

  // A rebuild from the newest snapshot + the log equals b's store (b stopped, so its store can be read).
  await b.stop();
  const all = Array.from({ length: PARTITIONS }, (_, p) => p);
  const rebuilt = await rebuildFromLog(client, path.join(tempDir(t), 'rebuilt'), all);
  t.teardown(() => rebuilt.close());
  const leader = await openWorkerStore(path.join(b.dir, 'data', 'worker'));
  t.teardown(() => leader.close());
  const [want, got] = [await partitionKeys(leader, all), await partitionKeys(rebuilt, all)];
  t.ok(Object.keys(want).length > 100, `${Object.keys(want).length} state keys on the leader`);
  t.same(got, want, 'snapshot + log rebuilds exactly the leader\'s state');

  // Without the snapshots, a node with an empty disk cannot rebuild a trimmed log: it says so.
  const blind = new KafkaLogClient({ ...client.settings, snapshots: undefined }, silentLogger);
  t.teardown(() => blind.close());
  const empty = await openWorkerStore(path.join(tempDir(t), 'empty'));
  t.teardown(() => empty.close());
  await t.rejects(KafkaLog.open(empty, 0, new GroupWriter(empty), blind), { code: 'KEEL0804', message: /its log starts at offset [1-9]\d*, this node's copy ends at nothing, and no snapshot reaches the log/ }, 'KEEL0804: no snapshot reaches the trimmed log');
});
