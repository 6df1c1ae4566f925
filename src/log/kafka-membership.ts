// Which node of a cluster is active: a Kafka consumer group of all nodes.
//
// The nodes join one group (`<log_topic>-nodes`, subscribed to the one-partition metadata topic),
// and the group's assignor gives that partition to the node that is to be active; the others
// stand by and forward what they are asked to it. Kafka does the failure detection: a node that
// stops heartbeating (SIGKILL, SIGSTOP, a partition of the network) leaves the group after
// `session_timeout_ms`, the group rebalances, and a standby is assigned the partition.
//
// The choice is sticky: each member's join carries the leader epoch it holds (of Keel
// partition 0, announced in the log), and the assignor keeps the member with the highest one, so
// a node joining does not move the work, and a deposed node coming back (whose epoch is older)
// does not win it back. An active node that finds itself unassigned has been deposed already:
// another node announced a later epoch, and its own appends are void (kafka-log.ts).
import type { Consumer, Kafka } from 'kafkajs';
import { loadKafkajs } from './kafkajs.js';
import type { Logger } from '../common/logger.js';

/** What a node tells the others about itself. */
export interface NodeInfo {
  node: string;
  /** Base URLs the others forward to. */
  ingress: string;
  admin: string;
}

export interface MembershipView {
  /** Whether this node is the one assigned the work. */
  active: boolean;
  /** The active node, as far as this node knows (undefined between rebalances or when none is). */
  leader: NodeInfo | undefined;
  members: NodeInfo[];
}

interface MemberData extends NodeInfo {
  epoch: number;
  /** Whether the node is active or taking over (its epoch is announced only once it has). */
  active: boolean;
}

const ASSIGNOR = 'keel-active-node';
/** How long a start waits to be in the group before it says it is ready anyway (as a standby). */
const FIRST_JOIN_WAIT_MS = 30_000;

/**
 * The member to be active: one that is active or taking over, then the highest epoch held, then the
 * first name. (A node restarting holds no epoch yet: without the first rule it could take the work
 * back from one still taking over, which then steps down.)
 */
export function chooseActive(members: ReadonlyArray<{ memberId: string; data: MemberData }>): string | undefined {
  const before = (a: MemberData, b: MemberData): boolean => (a.active !== b.active ? a.active : a.epoch !== b.epoch ? a.epoch > b.epoch : a.node < b.node);
  let best: { memberId: string; data: MemberData } | undefined;
  for (const m of members) if (best === undefined || before(m.data, best.data)) best = m;
  return best?.memberId;
}

export class ClusterMembership {
  private consumer: Consumer | undefined;
  private view: MembershipView = { active: false, leader: undefined, members: [] };
  private readonly listeners = new Set<(view: MembershipView) => void>();
  /** Joins seen, so the description of an older one does not overwrite a newer view. */
  private joins = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly group: string,
    private readonly topic: string,
    private readonly self: NodeInfo,
    /** The leader epoch this node holds now (0: none). */
    private readonly epoch: () => number,
    /** Whether this node is active or taking over. */
    private readonly activeNow: () => boolean,
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

  async start(): Promise<void> {
    const { AssignerProtocol } = loadKafkajs();
    const encode = (): Buffer => AssignerProtocol.MemberMetadata.encode({ version: 1, topics: [this.topic], userData: Buffer.from(JSON.stringify({ ...this.self, epoch: this.epoch(), active: this.activeNow() })) });
    const assigner = () => ({
      name: ASSIGNOR,
      version: 1,
      protocol: () => ({ name: ASSIGNOR, metadata: encode() }),
      assign: async ({ members }: { members: Array<{ memberId: string; memberMetadata: Buffer }> }) => {
        const decoded = members.map((m) => ({ memberId: m.memberId, data: dataOf(m.memberMetadata) }));
        const active = chooseActive(decoded);
        return members.map((m) => ({
          memberId: m.memberId,
          memberAssignment: AssignerProtocol.MemberAssignment.encode({ version: 1, assignment: m.memberId === active ? { [this.topic]: [0] } : {}, userData: Buffer.alloc(0) }),
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
    consumer.on(consumer.events.GROUP_JOIN, (e) => void this.joined(e.payload.memberAssignment));
    await consumer.connect();
    await consumer.subscribe({ topic: this.topic, fromBeginning: false });
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

  private async joined(assignment: Record<string, number[]>): Promise<void> {
    const join = ++this.joins;
    const active = (assignment[this.topic] ?? []).includes(0);
    let members: NodeInfo[] = [];
    let leader: NodeInfo | undefined = active ? this.self : undefined;
    try {
      const description = await this.consumer!.describeGroup();
      const { AssignerProtocol } = loadKafkajs();
      for (const m of description.members) {
        const data = dataOf(m.memberMetadata);
        members.push({ node: data.node, ingress: data.ingress, admin: data.admin });
        const assigned = AssignerProtocol.MemberAssignment.decode(m.memberAssignment);
        if ((assigned?.assignment[this.topic] ?? []).includes(0)) leader = { node: data.node, ingress: data.ingress, admin: data.admin };
      }
    } catch (err) {
      this.logger.warn({ err, code: 'KEEL0801' }, 'cannot describe the cluster group; the active node is unknown until the next rebalance');
      members = [this.self];
    }
    if (join !== this.joins) return; // a later join's view is on its way
    this.view = { active, leader, members };
    this.logger.info({ active, leader: leader?.node, members: members.map((m) => m.node) }, active ? 'this node is the active node' : `standing by; ${leader?.node ?? 'no node'} is active`);
    for (const listener of this.listeners) listener(this.view);
  }
}

function dataOf(metadata: Buffer): MemberData {
  const { AssignerProtocol } = loadKafkajs();
  const raw = AssignerProtocol.MemberMetadata.decode(metadata)?.userData;
  try {
    const data = JSON.parse(raw?.toString('utf8') ?? '') as MemberData;
    if (typeof data.node === 'string' && typeof data.ingress === 'string' && typeof data.admin === 'string') return { ...data, epoch: Number(data.epoch) || 0, active: data.active === true };
  } catch {
    // a member of another kind in the group: never chosen
  }
  return { node: '~', ingress: '', admin: '', epoch: -1, active: false };
}
