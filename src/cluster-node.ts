// A node of a Keel cluster: one node is active — it leads every partition (its logs in Kafka),
// runs the invoker, the timers and the subscriptions — and the others stand by, forwarding what
// they are asked to it (forwarding.ts). Kafka's group membership says which (kafka-membership.ts);
// when the active node leaves the group (SIGKILL, SIGSTOP past its session), a standby catches
// the partitions up from the log (from what its own store applied), announces a new epoch on
// each, and serves.
//
// A node that was active and finds another one chosen was deposed while it could not see it
// (paused, cut off): the new leader's announcements make its appends void, so it acknowledges
// nothing more, and it exits rather than trust anything it holds in memory. Its supervisor
// starts it again, as a standby.
import type { Logger } from './common/logger.js';
import { splitAddress, type ClusterConfig, type Config } from './config/index.js';
import { KafkaLogClient } from './log/kafka-log.js';
import { ClusterMembership, type MembershipView, type NodeInfo } from './log/kafka-membership.js';
import type { Route } from './forwarding.js';
import { DirectorySnapshotStore } from './storage/snapshots.js';

type Role = 'standby' | 'activating' | 'active';

/** A partition this node keeps up with while another node leads it (partition/catch-up.ts). */
export interface Follower {
  readonly applied_position: number;
  stop(): Promise<void>;
}

/** The longest a step of stopping waits for kafkajs. */
const STOP_STEP_MS = 3_000;
/** How often the active node looks for a stopped partition. */
const PARTITION_WATCH_MS = 500;

function bounded(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return Promise.race([work.catch(() => undefined), late]).finally(() => clearTimeout(timer));
}

export interface ClusterStatus {
  node: string;
  role: Role;
  active_node: string | undefined;
  members: string[];
  partitions: Array<{ partition: number; leader_epoch: number | undefined; applied_position: number | undefined }>;
}

export class ClusterNode {
  readonly log: KafkaLogClient;
  private readonly membership: ClusterMembership;
  private role: Role = 'standby';
  private watch: NodeJS.Timeout | undefined;
  /** While standing by: the partitions followed, by partition. */
  private following: Promise<Follower[]> | undefined;
  private followers: Follower[] = [];
  private view: MembershipView = { active: false, leader: undefined, members: [] };
  /** Stops what activating started beside the partitions. */
  private stopActive: (() => Promise<void>) | undefined;
  private lag: LogLag | undefined;
  readonly self: NodeInfo;

  constructor(
    private readonly config: Config,
    cluster: ClusterConfig,
    private readonly logger: Logger,
    /** Opens and starts the partitions, the invoker, timers and subscriptions on this node; returns what stops its background work (snapshots). */
    private readonly activate: (log: KafkaLogClient) => Promise<(() => Promise<void>) | undefined>,
    /** This node was deposed while active: it must stop at once. */
    private readonly deposed: (reason: string) => void,
    /** Why a partition stopped on this node, if one did. */
    private readonly stopped: () => string | undefined,
    /** Starts following every partition's log into this node's store (while it stands by). */
    private readonly follow: (log: KafkaLogClient) => Promise<Follower[]>,
  ) {
    const host = cluster.advertised_host.includes(':') ? `[${cluster.advertised_host}]` : cluster.advertised_host;
    this.self = {
      node: cluster.node_name,
      ingress: `http://${host}:${splitAddress(config.ingress.bind_address).port}`,
      admin: `http://${host}:${splitAddress(config.admin.bind_address).port}`,
    };
    this.log = new KafkaLogClient(
      {
        node: cluster.node_name, brokers: cluster.brokers, topic: cluster.log_topic, partitions: config.worker.partitions, replication_factor: cluster.replication_factor, min_insync_replicas: cluster.min_insync_replicas, transactional: cluster.transactional,
        ...(cluster.snapshot_path !== undefined ? { snapshots: new DirectorySnapshotStore(cluster.snapshot_path) } : {}),
      },
      logger.child({ component: 'kafka-log' }),
    );
    this.membership = new ClusterMembership(this.log.kafka, `${cluster.log_topic}-nodes`, `${cluster.log_topic}-meta`, this.self, () => this.log.epochs.get(0) ?? 0, () => this.role !== 'standby', cluster.session_timeout_ms, logger.child({ component: 'membership' }));
    this.membership.onChange((view) => this.changed(view));
  }

  /** Creates the log topic when missing and joins the cluster's group (the metadata topic exists: the registry opened it). */
  async start(): Promise<void> {
    await this.log.ensureTopic();
    await this.membership.start();
  }

  /** Starts reading how far this node's copies are behind the logs (`appliedOffset`: a partition's cursor in the store). */
  watchLag(appliedOffset: (partition: number) => Promise<number | undefined>): LogLag {
    this.lag = new LogLag(this.log, appliedOffset, this.config.worker.partitions);
    this.lag.start();
    return this.lag;
  }

  /** Stops the background work of an active node (before its partitions close). */
  async stopWork(): Promise<void> {
    const stop = this.stopActive;
    this.stopActive = undefined;
    await stop?.();
  }

  /**
   * Leaves the group (a standby is chosen at once, without waiting out this node's session) and
   * closes the Kafka clients. Each step is bounded: kafkajs can wait out its request timeouts on
   * a broker that died and came back, while the work is to be handed over in seconds.
   */
  async stop(): Promise<void> {
    clearInterval(this.watch);
    this.lag?.stop();
    await this.stopWork();
    await this.stopFollowing();
    await bounded(this.membership.stop(), STOP_STEP_MS);
    await bounded(this.log.close(), STOP_STEP_MS);
  }

  /** Where a request to the ingress (or admin API) goes now. */
  route(server: 'ingress' | 'admin'): Route {
    return () => {
      if (this.role === 'active') return 'local';
      if (this.role === 'activating') return undefined;
      const leader = this.view.leader;
      return leader === undefined || leader.node === this.self.node ? undefined : leader[server];
    };
  }

  /** What /metrics samples: the role, the members seen, the epochs led. */
  sample(): { active: boolean; members: number; epochs: Array<[number, number]>; fetch_requests: number } {
    return { active: this.role === 'active', members: this.view.members.length, epochs: this.role === 'active' ? [...this.log.epochs] : [], fetch_requests: this.log.reader.fetch_requests };
  }

  /** `applied`: the last log position each partition applied on this node (while it leads them). */
  status(applied: (partition: number) => number | undefined = () => undefined): ClusterStatus {
    return {
      node: this.self.node,
      role: this.role,
      active_node: this.role === 'active' ? this.self.node : this.view.leader?.node,
      members: this.view.members.map((m) => m.node).sort(),
      partitions: Array.from({ length: this.config.worker.partitions }, (_, p) => ({
        partition: p,
        leader_epoch: this.role === 'active' ? this.log.epochs.get(p) : undefined,
        applied_position: this.role === 'active' ? applied(p) : this.followers[p]?.applied_position,
      })),
    };
  }

  /**
   * A partition that stops on the active node (a write Kafka refused past its retries, a broken
   * invariant) would stay stopped until a restart while the node goes on leading it: the node
   * steps down instead, and a standby rebuilds the partition from the log.
   */
  private watchPartitions(): void {
    this.watch = setInterval(() => {
      const reason = this.stopped();
      if (reason !== undefined) this.deposed(`a partition stopped: ${reason}`);
    }, PARTITION_WATCH_MS);
    this.watch.unref();
  }

  private changed(view: MembershipView): void {
    this.view = view;
    if (view.active && this.role === 'standby') {
      this.role = 'activating';
      const started = performance.now();
      this.stopFollowing()
        .then(() => this.activate(this.log))
        .then(
          (stop) => {
            this.stopActive = stop;
            this.role = 'active';
            this.watchPartitions();
            this.logger.info({ node: this.self.node, took_ms: Math.round(performance.now() - started), epochs: Object.fromEntries(this.log.epochs) }, 'this node is active: it leads every partition');
          },
          (err: unknown) => this.deposed(`taking the lead failed: ${(err as Error)?.message ?? String(err)}`),
        );
    } else if (!view.active && this.role !== 'standby') {
      this.deposed(`the cluster chose ${view.leader?.node ?? 'another node'} while this node was ${this.role}`);
    } else if (!view.active && this.following === undefined) {
      this.following = this.follow(this.log).then(
        (followers) => (this.followers = followers),
        (err: unknown) => {
          this.logger.warn({ err, code: 'KEEL0801' }, 'cannot follow the partition logs; this node catches up when it takes the lead');
          return [];
        },
      );
    }
  }

  /** Stops following and waits until what was read is in the store (taking the lead reads on from there). */
  private async stopFollowing(): Promise<void> {
    const followers = await this.following;
    this.following = undefined;
    this.followers = [];
    await Promise.all((followers ?? []).map((f) => f.stop()));
  }
}

/** How often the lag of this node's copies behind the logs is read for /metrics. */
const LAG_REFRESH_MS = 5_000;

export interface PartitionLag {
  partition: number;
  /** The end of the partition's log in Kafka (the offset its next record gets). */
  log_end_offset: number;
  /** Where this node's copy ends in the log (the next offset it reads). */
  applied_offset: number;
  /** Offsets between the two: records (commands, announcements) this node has not applied yet. */
  lag_offsets: number;
}

/** How far this node's copy of each partition is behind its log: read on GET /cluster, and every LAG_REFRESH_MS for /metrics. */
export class LogLag {
  private last: PartitionLag[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly log: KafkaLogClient,
    /** The next offset this node's copy of the partition reads (its cursor in the store). */
    private readonly appliedOffset: (partition: number) => Promise<number | undefined>,
    private readonly partitions: number,
  ) {}

  get current(): readonly PartitionLag[] {
    return this.last;
  }

  async refresh(): Promise<PartitionLag[]> {
    const bounds = await this.log.logBounds();
    this.last = await Promise.all(
      Array.from({ length: this.partitions }, async (_, partition) => {
        const log_end_offset = bounds[partition]?.end ?? 0;
        const applied_offset = (await this.appliedOffset(partition)) ?? 0;
        return { partition, log_end_offset, applied_offset, lag_offsets: Math.max(0, log_end_offset - applied_offset) };
      }),
    );
    return this.last;
  }

  start(): void {
    this.timer = setInterval(() => void this.refresh().catch(() => undefined), LAG_REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
