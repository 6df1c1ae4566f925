// Who leads which partition of a cluster: a Kafka consumer group of all nodes.
//
// The nodes join one group (`<log_topic>-nodes`, subscribed to the one-partition metadata topic,
// of which no partition is ever assigned), and the group's assignor shares Keel's partitions out
// among them in the assignment's user data (`assignPartitions`): all to one node, the others
// standing by, or spread evenly (`cluster.spread_partitions`). Kafka does the failure detection: a
// node that stops heartbeating (SIGKILL, SIGSTOP, a partition of the network) leaves the group
// after `session_timeout_ms`, the group rebalances, and its partitions go to the others.
//
// The choice is sticky: each member's join carries the partitions it leads and the epoch it holds
// in each (announced in the log), and a partition stays with the member holding its highest
// epoch, so a node joining moves only what evens the load out, and a deposed node coming back
// (whose epochs are older) wins nothing back. A node that finds a partition it led assigned
// elsewhere has been deposed from it, or is handing it over: the new leader's announcement makes
// its later appends void (kafka-log.ts).
import type { Admin, Consumer, GroupDescription, Kafka } from 'kafkajs';
import { isTransientKafkaError, loadKafkajs, retryingRead } from './kafkajs.js';
import { assert } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import { KeelError } from '../errors/index.js';

/** What a node tells the others about itself. */
export interface NodeInfo {
  node: string;
  /** Base URLs the others forward to. */
  ingress: string;
  admin: string;
}

export interface MembershipView {
  /** This node's id in the group (a new one after it was out of the group). */
  member_id: string | undefined;
  /** The partitions this node is to lead, in order. */
  assigned: number[];
  /** Who leads each partition, by partition, as far as this node knows (undefined between rebalances, or none). */
  leaders: Array<NodeInfo | undefined>;
  members: NodeInfo[];
}

interface MemberData extends NodeInfo {
  /**
   * The partitions the node leads or is taking over, with the epoch it holds in each (0 while
   * taking over: its announcement is not read back yet).
   */
  claims: Record<string, number>;
  /** The node's worker.partitions and cluster.spread_partitions (absent from the nodes of before they were sent). */
  partitions?: number;
  spread?: boolean;
  /** When the node's run started (Date.now()): of two under one name, the later leaves (laterTwins). */
  started_at_ms?: number;
}

export interface Member {
  memberId: string;
  data: MemberData;
}

const ASSIGNOR = 'keel-partitions';
/** How long a start waits to be in the group before it says it is ready anyway (as a standby). */
const FIRST_JOIN_WAIT_MS = 30_000;
/** Tries, and the wait between them, to read the group's assignment after a rebalance. */
const DESCRIBE_TRIES = 5;
const DESCRIBE_RETRY_MS = 200;
/**
 * A member under this node's name at other addresses is waited for this long past a session
 * before the start is refused (a run of this node killed a moment ago leaves the group within a
 * session), and the group looked at again this often meanwhile.
 */
const NAME_GRACE_MS = 3_000;
const NAME_POLL_MS = 500;
/** How long a node refused by the group waits to leave it before it stops anyway (the group then waits out its session). */
const LEAVE_WAIT_MS = 3_000;

/**
 * Which member leads which partitions. Sticky: a partition stays with the member that claims it
 * with the highest epoch (a deposed node coming back claims an older one and does not win it
 * back; ties go to the first name). `spread`: the partitions are shared out evenly, moving as few
 * as it takes when members join or leave; otherwise one member leads them all — the one that
 * claims any (a node restarting claims none, so it cannot take them from one still taking over),
 * then the one with the highest epoch, then the first name.
 */
export function assignPartitions(members: readonly Member[], partitions: number, spread: boolean): Map<string, number[]> {
  const out = new Map<string, number[]>(members.map((m) => [m.memberId, []]));
  if (members.length === 0) return out;
  const byName = [...members].sort((a, b) => (a.data.node < b.data.node ? -1 : a.data.node > b.data.node ? 1 : a.memberId < b.memberId ? -1 : 1));
  const epochOf = (m: Member, p: number): number | undefined => m.data.claims[String(p)];
  if (!spread) {
    const strongest = (m: Member): [number, number] => {
      const epochs = Object.values(m.data.claims);
      return [epochs.length > 0 ? 1 : 0, epochs.length > 0 ? Math.max(...epochs) : -1];
    };
    let best = byName[0]!;
    for (const m of byName) {
      const [a, b] = [strongest(m), strongest(best)];
      if (a[0] > b[0] || (a[0] === b[0] && a[1] > b[1])) best = m;
    }
    out.set(best.memberId, Array.from({ length: partitions }, (_, p) => p));
    return out;
  }
  const pool: number[] = [];
  for (let p = 0; p < partitions; p++) {
    let holder: Member | undefined;
    for (const m of byName) {
      const e = epochOf(m, p);
      if (e !== undefined && (holder === undefined || e > epochOf(holder, p)!)) holder = m;
    }
    if (holder === undefined) pool.push(p);
    else out.get(holder.memberId)!.push(p);
  }
  // The members holding most get the shares one larger (as many as do not divide evenly).
  const base = Math.floor(partitions / members.length);
  const larger = new Set([...byName].sort((a, b) => out.get(b.memberId)!.length - out.get(a.memberId)!.length).slice(0, partitions % members.length).map((m) => m.memberId));
  const quota = (m: Member): number => base + (larger.has(m.memberId) ? 1 : 0);
  for (const m of byName) {
    const mine = out.get(m.memberId)!.sort((a, b) => a - b);
    while (mine.length > quota(m)) pool.push(mine.pop()!);
  }
  pool.sort((a, b) => a - b);
  for (const m of byName) {
    const mine = out.get(m.memberId)!;
    while (mine.length < quota(m)) mine.push(pool.shift()!);
    mine.sort((a, b) => a - b);
  }
  assert(pool.length === 0, () => `${pool.length} partitions left unassigned`);
  return out;
}

/**
 * The members that run under the name of one that started before them, at other addresses: two
 * nodes started under one name at once both passed the check of the group before either had
 * joined (fitsGroup). They get no partitions, and each leaves once it sees itself among them.
 * A member under its own name at its own addresses is a killed run of it, not a twin. Ties of the
 * start time go to the smaller member id, so that every member tells the same one apart.
 */
export function laterTwins(members: readonly Member[]): Set<string> {
  const later = new Set<string>();
  const before = (a: Member, b: Member): boolean => {
    const [x, y] = [a.data.started_at_ms ?? 0, b.data.started_at_ms ?? 0];
    return x < y || (x === y && a.memberId < b.memberId);
  };
  for (const m of members) {
    if (members.some((o) => o !== m && isTwin(o.data, m.data) && before(o, m))) later.add(m.memberId);
  }
  return later;
}

/** Two nodes under one name at other addresses (at the same ones it is a run of one node killed, and the next). */
function isTwin(a: NodeInfo, b: NodeInfo): boolean {
  return a.node === b.node && (a.ingress !== b.ingress || a.admin !== b.admin);
}

/** The partitions of the members of Keel's kind (others get none), a later twin's (laterTwins) left out. */
export function assignMembers(members: readonly Member[], partitions: number, spread: boolean): Map<string, number[]> {
  const twins = laterTwins(members);
  return assignPartitions(members.filter((m) => !twins.has(m.memberId)), partitions, spread);
}

export class ClusterMembership {
  private consumer: Consumer | undefined;
  private view: MembershipView = { member_id: undefined, assigned: [], leaders: [], members: [] };
  private readonly listeners = new Set<(view: MembershipView) => void>();
  private readonly refusalListeners = new Set<(err: KeelError) => void>();
  private readonly startedAt_ms = Date.now();
  private refused = false;
  /** Joins seen, so the description of an older one does not overwrite a newer view. */
  private joins = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly group: string,
    private readonly topic: string,
    private readonly self: NodeInfo,
    /** The partitions this node leads or is taking over, with the epoch it holds in each (0 while taking over). */
    private readonly claims: () => Record<string, number>,
    /** Keel's partitions, and whether they are spread over the members (or all led by one). */
    private readonly partitions: number,
    private readonly spread: boolean,
    private readonly session_timeout_ms: number,
    private readonly logger: Logger,
  ) {}

  get current(): MembershipView {
    return this.view;
  }

  onChange(listener: (view: MembershipView) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Hears, once, that the group refuses this node (RT0002: another node runs under its name); the node has left the group by then. */
  onRefusal(listener: (err: KeelError) => void): void {
    this.refusalListeners.add(listener);
  }

  async start(): Promise<void> {
    await this.fitsGroup();
    const { AssignerProtocol } = loadKafkajs();
    const encode = (): Buffer => AssignerProtocol.MemberMetadata.encode({ version: 1, topics: [this.topic], userData: Buffer.from(JSON.stringify({ ...this.self, claims: this.claims(), partitions: this.partitions, spread: this.spread, started_at_ms: this.startedAt_ms })) });
    const assigner = () => ({
      name: ASSIGNOR,
      version: 1,
      protocol: () => ({ name: ASSIGNOR, metadata: encode() }),
      assign: async ({ members }: { members: Array<{ memberId: string; memberMetadata: Buffer }> }) => {
        const assigned = assignMembers(keelMembers(members), this.partitions, this.spread);
        // Keel's partitions travel in the assignment's user data: no partition of the topic is consumed.
        return members.map((m) => ({
          memberId: m.memberId,
          memberAssignment: AssignerProtocol.MemberAssignment.encode({ version: 1, assignment: {}, userData: Buffer.from(JSON.stringify(assigned.get(m.memberId) ?? [])) }),
        }));
      },
    });
    const heartbeat = Math.max(100, Math.floor(this.session_timeout_ms / 5));
    const consumer = this.kafka.consumer({
      groupId: this.group,
      partitionAssigners: [assigner],
      sessionTimeout: this.session_timeout_ms,
      rebalanceTimeout: Math.max(this.session_timeout_ms, 3_000),
      heartbeatInterval: heartbeat,
      maxWaitTimeInMs: heartbeat,
      retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 1_000 },
    });
    this.consumer = consumer;
    consumer.on(consumer.events.GROUP_JOIN, (e) => void this.joined(e.payload.memberId).catch((err: unknown) => this.logger.error({ err, code: 'KEEL0801' }, 'cannot take in a rebalance of the cluster group')));
    await consumer.connect();
    // Subscribing reads the topic's metadata: a broker may not know a topic just created yet.
    await retryingRead(() => consumer.subscribe({ topic: this.topic, fromBeginning: false }));
    // The metadata topic is read by the registry; this consumer only keeps the node in the group.
    const joined = new Promise<void>((resolve) => {
      const off = this.onChange(() => {
        off();
        resolve();
      });
    });
    await consumer.run({ autoCommit: false, eachBatch: async () => undefined });
    // Started means joined: the node knows whether it is active, and which node is.
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), FIRST_JOIN_WAIT_MS)));
    if (await Promise.race([joined.then(() => false), late])) this.logger.warn({ code: 'KEEL0801', waited_ms: FIRST_JOIN_WAIT_MS }, 'not yet a member of the cluster group; standing by meanwhile');
    clearTimeout(timer);
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect().catch(() => undefined);
  }

  /**
   * Refuses the start (RT0002) where this node would not fit the running ones of the group:
   * - another node runs under this node's name. The nodes know each other by name, so each would
   *   take the other's partitions for unled ones, and requests for them waited out the leader wait
   *   and got 503. A member under this name at this node's own addresses is a run of this node that
   *   was killed (no other process holds its ports); one at other addresses may be too, so it is
   *   waited for to leave, a session and a little more. Two started at once both pass this; the
   *   group tells them apart once they are in it (laterTwins);
   * - another node runs with another worker.partitions or cluster.spread_partitions (refuseUnlike).
   * A group that is rebalancing tells no member's data: it is looked at again until the deadline,
   * then joined. One that cannot be read (its coordinator moving) is joined unchecked, as before.
   */
  private async fitsGroup(): Promise<void> {
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      const deadline = performance.now() + this.session_timeout_ms + NAME_GRACE_MS;
      for (let warned = false; ; ) {
        const group = await this.describedGroup(admin);
        if (group === undefined) return;
        const members = keelMembers(group.members).map((m) => m.data);
        // This node's own earlier run may have had other settings: only the other nodes count.
        for (const d of members) if (d.node !== this.self.node) this.refuseUnlike(d);
        const twin = members.find((d) => isTwin(d, this.self));
        const settled = group.state === 'Stable' || group.state === 'Empty' || group.state === 'Dead';
        if (twin === undefined && settled) return;
        if (performance.now() >= deadline) {
          if (twin === undefined) return;
          throw new KeelError('RT0002', `cluster.node_name '${this.self.node}' is taken: another node of the cluster runs under it (ingress ${twin.ingress}, admin ${twin.admin}); give each node a name of its own`);
        }
        if (twin !== undefined && !warned) {
          warned = true;
          this.logger.warn({ code: 'RT0002', node: this.self.node, ingress: twin.ingress, wait_ms: Math.round(deadline - performance.now()) }, `a member of the cluster group runs under this node's name at other addresses; waiting for it to leave (a run of this node killed a moment ago does)`);
        }
        await new Promise((r) => setTimeout(r, NAME_POLL_MS));
      }
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  /** The group as its coordinator describes it, or undefined (warned) while that passes Kafka trouble. */
  private async describedGroup(admin: Admin): Promise<GroupDescription | undefined> {
    try {
      return (await retryingRead(() => admin.describeGroups([this.group]))).groups[0];
    } catch (err) {
      if (!isTransientKafkaError(err)) throw err;
      this.logger.warn({ err, code: 'KEEL0801' }, 'cannot read the cluster group before joining it; joining without checking the other nodes');
      return undefined;
    }
  }

  /**
   * Another node's settings that this one must share: worker.partitions (each maps keys to
   * partitions by it: one key would be on two partitions, and the partitions only one knew unled)
   * and cluster.spread_partitions (a node spreading beside one that does not sent it the partitions
   * the group gave it, which it refused, KEEL0803, for good). Nodes from before they were told send neither.
   */
  private refuseUnlike(d: MemberData): void {
    const at = `on node '${d.node}' (ingress ${d.ingress})`;
    if (d.partitions !== undefined && d.partitions !== this.partitions) {
      throw new KeelError('RT0002', `worker.partitions is ${this.partitions} here but ${d.partitions} ${at}: every node of a cluster needs the same`);
    }
    if (d.spread !== undefined && d.spread !== this.spread) {
      throw new KeelError('RT0002', `cluster.spread_partitions is ${this.spread} here but ${d.spread} ${at}: every node of a cluster needs the same`);
    }
  }

  /**
   * After each rebalance: who leads what. kafkajs passes on only the assignment's topic
   * partitions, so this node's share, like everyone's, is read from the group's description, once
   * the group is stable with this member in it (a description taken while the next rebalance
   * begins has no assignments). Without one, the node keeps its view until the next rebalance.
   */
  private async joined(memberId: string): Promise<void> {
    const join = ++this.joins;
    let description: Awaited<ReturnType<Consumer['describeGroup']>> | undefined;
    for (let tries = 0; description === undefined && tries < DESCRIBE_TRIES && join === this.joins; tries++) {
      if (tries > 0) await new Promise((r) => setTimeout(r, DESCRIBE_RETRY_MS));
      const described = await this.consumer!.describeGroup().catch((err: unknown) => {
        this.logger.debug({ err }, 'cannot describe the cluster group yet');
        return undefined;
      });
      if (described?.state === 'Stable' && described.members.some((m) => m.memberId === memberId)) description = described;
    }
    if (join !== this.joins || this.refused) return; // a later join's view is on its way
    if (description === undefined) {
      this.logger.warn({ code: 'KEEL0801', tries: DESCRIBE_TRIES }, 'cannot read the cluster group\'s assignment; this node keeps what it leads until the next rebalance');
      return;
    }
    if (await this.refusedAsTwin(description.members, memberId)) return;
    let assigned: number[] = [];
    const members: NodeInfo[] = [];
    const leaders: Array<NodeInfo | undefined> = Array.from({ length: this.partitions }, () => undefined);
    for (const m of description.members) {
      const data = dataOf(m.memberMetadata);
      if (data === undefined) continue;
      const info = { node: data.node, ingress: data.ingress, admin: data.admin };
      members.push(info);
      const share = partitionsOf(assignmentData(m.memberAssignment));
      if (m.memberId === memberId) assigned = share;
      for (const p of share) if (p < this.partitions) leaders[p] = m.memberId === memberId ? this.self : info;
    }
    this.view = { member_id: memberId, assigned: assigned.filter((p) => p < this.partitions), leaders, members };
    const others = [...new Set(leaders.filter((l): l is NodeInfo => l !== undefined && l.node !== this.self.node).map((l) => l.node))];
    this.logger.info({ assigned: this.view.assigned, members: members.map((m) => m.node), other_leaders: others }, this.view.assigned.length > 0 ? `this node leads ${this.view.assigned.length} of ${this.partitions} partitions` : `standing by; ${others.join(', ') || 'no node'} leads the partitions`);
    for (const listener of this.listeners) listener(this.view);
  }

  /**
   * Whether this node runs under the name of a member that started before it (laterTwins): then
   * it leaves the group, so that the group rebalances without it at once, and tells the refusal.
   */
  private async refusedAsTwin(described: ReadonlyArray<{ memberId: string; memberMetadata: Buffer }>, memberId: string): Promise<boolean> {
    const members = keelMembers(described);
    const twins = laterTwins(members);
    if (!twins.has(memberId)) return false;
    const first = members.find((m) => m.data.node === this.self.node && !twins.has(m.memberId));
    this.refused = true;
    const err = new KeelError('RT0002', `cluster.node_name '${this.self.node}' is taken: another node of the cluster started under it first (ingress ${first?.data.ingress ?? 'unknown'}, admin ${first?.data.admin ?? 'unknown'}); give each node a name of its own`);
    await Promise.race([this.stop(), new Promise((r) => setTimeout(r, LEAVE_WAIT_MS).unref())]);
    for (const listener of this.refusalListeners) listener(err);
    return true;
  }
}

/** The user data of a member's assignment (undefined where there is none or it does not decode). */
function assignmentData(assignment: Buffer): Buffer | undefined {
  try {
    return loadKafkajs().AssignerProtocol.MemberAssignment.decode(assignment)?.userData ?? undefined;
  } catch {
    return undefined;
  }
}

/** The Keel partitions in an assignment's user data. */
function partitionsOf(userData: Buffer | null | undefined): number[] {
  try {
    const list = JSON.parse(userData?.toString('utf8') ?? '[]') as unknown;
    return Array.isArray(list) ? list.filter((p): p is number => Number.isInteger(p) && p >= 0).sort((a, b) => a - b) : [];
  } catch {
    return [];
  }
}

/** The members of a group that are Keel nodes, with what each told. */
function keelMembers(members: ReadonlyArray<{ memberId: string; memberMetadata: Buffer }>): Member[] {
  return members.map((m) => ({ memberId: m.memberId, data: dataOf(m.memberMetadata) })).filter((m): m is Member => m.data !== undefined);
}

function dataOf(metadata: Buffer): MemberData | undefined {
  try {
    const raw = loadKafkajs().AssignerProtocol.MemberMetadata.decode(metadata)?.userData;
    const data = JSON.parse(raw?.toString('utf8') ?? '') as MemberData;
    if (typeof data.node === 'string' && typeof data.ingress === 'string' && typeof data.admin === 'string' && typeof data.claims === 'object' && data.claims !== null) return data;
  } catch {
    // a member of another kind in the group, or one described without its metadata
  }
  return undefined;
}
