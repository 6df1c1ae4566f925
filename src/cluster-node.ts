// A node of a Keel cluster. Kafka's group membership shares the partitions out
// (kafka-membership.ts): one node leads them all while the others stand by, or, with
// `cluster.spread_partitions`, each node leads a share. This node reconciles what it leads with
// what it is assigned, one change at a time: it hands over what it no longer has (the partition
// closes: what it appended is written, its attempts stop), takes what it gained (catches the
// partition up from the log, from what its own store applied, and announces a new epoch), and
// follows every other partition's log into its store, so that taking one over later reads only
// the last moments. What runs beside the partitions (the invoker, the cleaner, timers,
// subscriptions, snapshots) starts the first time it leads any.
//
// A node that was out of the group while it led partitions (paused, cut off past its session)
// was deposed: the new leaders' announcements make its appends void, so it acknowledges nothing
// more, and it exits rather than trust anything it holds in memory. Its supervisor starts it
// again, as a new member.
import type { Logger } from './common/logger.js';
import type { KeelError } from './errors/index.js';
import { splitAddress, type ClusterConfig, type Config } from './config/index.js';
import { KafkaLogClient } from './log/kafka-log.js';
import { atBrokers, isTransientKafkaError } from './log/kafkajs.js';
import { ClusterMembership, type MembershipView, type NodeInfo } from './log/kafka-membership.js';
import type { Route } from './forwarding.js';
import { PeerClient } from './cluster-peers.js';
import { DirectorySnapshotStore } from './storage/snapshots.js';
import type { Db } from './storage/store.js';

/** `active`: leads every partition; `leading`: some; `activating`: taking some over; `standby`: none. */
type Role = 'standby' | 'activating' | 'active' | 'leading';

/** A partition this node keeps up with while another node leads it (partition/catch-up.ts). */
export interface Follower {
  readonly partition: number;
  readonly applied_position: number;
  /** The leader epoch announced last in what it has read. */
  readonly announced_epoch: number;
  /** Settles when following ends (stopped, or failed). */
  readonly ended: Promise<void>;
  stop(): Promise<void>;
}

/** What the node does to its partitions as leadership moves (server.ts wires them to the worker). */
export interface ClusterHooks {
  /**
   * Opens partitions to lead them: each catches up from the log and announces a new epoch. Those
   * that open stay open though another fails: the answer says which are open, and (present only
   * then) the failure. Never rejects.
   */
  open(log: KafkaLogClient, partitions: number[]): Promise<{ opened: number[]; failure?: unknown }>;
  /** Closes a partition this node leads: another node leads it from now on. */
  close(partition: number): Promise<void>;
  /** Starts what runs beside the partitions (once, when this node first leads any); returns what stops it. */
  startWork(log: KafkaLogClient): Promise<(() => Promise<void>) | undefined>;
  /** Follows these partitions' logs into this node's store. */
  follow(log: KafkaLogClient, partitions: number[]): Promise<Follower[]>;
  /** This node was deposed while it led partitions: it must stop at once. */
  deposed(reason: string): void;
  /** The cluster refuses this node (RT0002: another node runs under its name); it has left the group and must stop. */
  refused(err: KeelError): void;
  /** The partitions that stopped on this node, and why. */
  stopped(): Array<{ partition: number; reason: string }>;
}

/** The longest a step of stopping waits for kafkajs. */
const STOP_STEP_MS = 3_000;
/** How long after a failed follow or takeover the next reconciliation tries again. */
const RECONCILE_AGAIN_MS = 1_000;
/**
 * How long takeovers may go on failing on the cluster log being out of reach (tried again
 * RECONCILE_AGAIN_MS after each) before the node gives up and exits: one takeover's Kafka requests are
 * each retried ~14 s already.
 */
const TAKEOVER_RETRY_LIMIT_MS = 60_000;
/** How often a leading node looks for a stopped partition. */
const PARTITION_WATCH_MS = 500;

function bounded(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return Promise.race([work.catch(() => undefined), late]).finally(() => clearTimeout(timer));
}

export interface ClusterStatus {
  node: string;
  role: Role;
  /** The node that leads every partition, where one does. */
  active_node: string | undefined;
  members: string[];
  partitions: Array<{ partition: number; leader: string | undefined; leader_epoch: number | undefined; applied_position: number | undefined }>;
}

export class ClusterNode {
  readonly log: KafkaLogClient;
  private readonly membership: ClusterMembership;
  /** Partitions open on this node (it leads them), and those it is taking over. */
  private readonly leading = new Set<number>();
  private readonly taking = new Set<number>();
  private readonly followers = new Map<number, Follower>();
  /** The epoch announced last in what a follower of the partition read (when it stopped). */
  private readonly announcedSeen = new Map<number, number>();
  private view: MembershipView = { member_id: undefined, assigned: [], leaders: [], members: [] };
  /** One reconciliation at a time, in the order the views came. */
  private reconciling: Promise<void> = Promise.resolve();
  private stopping = false;
  private workStarted = false;
  private watch: NodeJS.Timeout | undefined;
  /** Stops what leading started beside the partitions. */
  private stopActive: (() => Promise<void>) | undefined;
  private lag: LogLag | undefined;
  readonly self: NodeInfo;
  /** This node's sessions to the others (forwarded requests, appends to partitions they lead). */
  readonly peers: PeerClient;
  /** Since when takeovers have failed on the cluster log being out of reach (unset once one succeeds). */
  private takeoverFailingSince: number | undefined;
  /** A reconciliation due: to follow again what failed to be followed, to take over again what failed to be taken. */
  private reconcileTimer: NodeJS.Timeout | undefined;
  private readonly partitions: number;
  private readonly spread: boolean;

  constructor(
    config: Config,
    cluster: ClusterConfig,
    private readonly logger: Logger,
    private readonly hooks: ClusterHooks,
  ) {
    const host = cluster.advertised_host.includes(':') ? `[${cluster.advertised_host}]` : cluster.advertised_host;
    this.self = {
      node: cluster.node_name,
      ingress: `http://${host}:${splitAddress(config.ingress.bind_address).port}`,
      admin: `http://${host}:${splitAddress(config.admin.bind_address).port}`,
    };
    this.partitions = config.worker.partitions;
    this.peers = new PeerClient(cluster.node_name, cluster.auth_tokens[0]);
    this.spread = cluster.spread_partitions;
    this.log = new KafkaLogClient(
      {
        node: cluster.node_name, brokers: cluster.brokers, topic: cluster.log_topic, partitions: config.worker.partitions, replication_factor: cluster.replication_factor, min_insync_replicas: cluster.min_insync_replicas, transactional: cluster.transactional,
        ...(cluster.snapshot_path !== undefined ? { snapshots: new DirectorySnapshotStore(cluster.snapshot_path) } : {}),
      },
      logger.child({ component: 'kafka-log' }),
    );
    this.membership = new ClusterMembership(this.log.kafka, `${cluster.log_topic}-nodes`, `${cluster.log_topic}-meta`, this.self, () => this.claims(), this.partitions, cluster.spread_partitions, cluster.session_timeout_ms, logger.child({ component: 'membership' }));
    this.membership.onChange((view) => this.changed(view));
    this.membership.onRefusal((err) => this.hooks.refused(err));
  }

  /**
   * Creates the log topic when missing, checks `store` (this node's copy of the logs) against
   * them, and joins the cluster's group (the metadata topic exists: the registry opened it).
   */
  async start(store: { db: Db; path: string }): Promise<void> {
    await atBrokers(`join the cluster (topic ${this.log.settings.topic})`, this.log.settings.brokers, async () => {
      await this.log.ensureTopic();
      await this.log.refuseStoreOfAnotherLog(store.db, store.path);
      await this.membership.start();
    });
  }

  /** Starts reading how far this node's copies are behind the logs (`appliedOffset`: a partition's cursor in the store). */
  watchLag(appliedOffset: (partition: number) => Promise<number | undefined>): LogLag {
    this.lag = new LogLag(this.log, appliedOffset, this.partitions);
    this.lag.start();
    return this.lag;
  }

  /** Stops the background work of a leading node (before its partitions close). */
  async stopWork(): Promise<void> {
    const stop = this.stopActive;
    this.stopActive = undefined;
    await stop?.();
  }

  /**
   * Leaves the group (the partitions go to the others at once, without waiting out this node's
   * session) and closes the Kafka clients. Each step is bounded: kafkajs can wait out its request
   * timeouts on a broker that died and came back, while the work is to be handed over in seconds.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.watch);
    clearTimeout(this.reconcileTimer);
    this.lag?.stop();
    // A take-over under way finishes first (or is given up on): its partitions are closed with the others.
    await bounded(this.reconciling, STOP_STEP_MS);
    await this.stopWork();
    await this.stopFollowing([...this.followers.keys()]);
    await bounded(this.membership.stop(), STOP_STEP_MS);
    await bounded(this.log.close(), STOP_STEP_MS);
    this.peers.close();
  }

  /** The node that leads a partition now: this one ('local'), another one, or none known. */
  leaderOf(partition: number): 'local' | NodeInfo | undefined {
    if (this.leading.has(partition)) return 'local';
    if (this.taking.has(partition)) return undefined;
    const leader = this.view.leaders[partition];
    return leader === undefined || leader.node === this.self.node ? undefined : leader;
  }

  /**
   * Where a request goes when one node leads every partition: here ('local'), that node, or
   * nowhere yet. (With the partitions spread, requests are routed by partition instead.)
   */
  route(server: 'ingress' | 'admin'): Route {
    return () => {
      const where = this.leaderOf(0);
      if (where === 'local') return this.leading.size === this.partitions ? 'local' : undefined;
      return where?.[server];
    };
  }

  /** What /metrics samples: whether this node leads every partition, the members seen, the epochs led. */
  sample(): { active: boolean; members: number; epochs: Array<[number, number]>; fetch_requests: number } {
    return { active: this.leading.size === this.partitions, members: this.view.members.length, epochs: [...this.log.epochs], fetch_requests: this.log.reader.fetch_requests };
  }

  /** `applied`: the last log position each partition applied on this node (while it leads them). */
  status(applied: (partition: number) => number | undefined = () => undefined): ClusterStatus {
    const leaders = Array.from({ length: this.partitions }, (_, p) => {
      const where = this.leaderOf(p);
      return where === 'local' ? this.self.node : where?.node;
    });
    const one = leaders[0] !== undefined && leaders.every((l) => l === leaders[0]) ? leaders[0] : undefined;
    return {
      node: this.self.node,
      role: this.role(),
      active_node: one,
      members: this.view.members.map((m) => m.node).sort(),
      partitions: leaders.map((leader, p) => ({
        partition: p,
        leader,
        leader_epoch: this.leading.has(p) ? this.log.epochs.get(p) : undefined,
        applied_position: this.leading.has(p) ? applied(p) : this.followers.get(p)?.applied_position,
      })),
    };
  }

  private role(): Role {
    if (this.taking.size > 0) return 'activating';
    if (this.leading.size === 0) return 'standby';
    return this.leading.size === this.partitions ? 'active' : 'leading';
  }

  /**
   * What this node tells the group it holds: each partition it leads with its epoch, each it is
   * taking over with the epoch it will announce at least (one past the last it read), so that a
   * node coming back with an older claim does not win the partition back in the middle.
   */
  private claims(): Record<string, number> {
    const claims: Record<string, number> = {};
    for (const p of this.taking) claims[String(p)] = (this.announcedSeen.get(p) ?? 0) + 1;
    for (const p of this.leading) claims[String(p)] = this.log.epochs.get(p) ?? 0;
    return claims;
  }

  /**
   * A partition that stops on this node (a write Kafka refused past its retries, a broken
   * invariant) while it is still assigned here would stay stopped until a restart while the node
   * goes on leading it: the node steps down instead, and the others rebuild it from the log. One
   * that stops while it is handed over (its late appends made void) is closing anyway.
   */
  private watchPartitions(): void {
    this.watch = setInterval(() => {
      const failure = this.hooks.stopped().find((f) => this.view.assigned.includes(f.partition) && this.leading.has(f.partition));
      if (failure !== undefined) this.hooks.deposed(`partition ${failure.partition} stopped: ${failure.reason}`);
    }, PARTITION_WATCH_MS);
    this.watch.unref();
  }

  private changed(view: MembershipView): void {
    const previous = this.view;
    this.view = view;
    const lost = [...this.leading, ...this.taking].filter((p) => !view.assigned.includes(p));
    // With one node leading everything, the assignment never moves a partition away from the
    // node that leads it: losing one means another node announced a later epoch meanwhile.
    if (!this.spread && lost.length > 0) {
      this.hooks.deposed(`the cluster chose ${view.leaders[lost[0]!]?.node ?? 'another node'} to lead partitions this node ${this.taking.size > 0 ? 'was taking over' : 'led'}`);
      return;
    }
    // Out of the group meanwhile (paused, cut off past its session: it rejoined as a new member):
    // others may have led its partitions since, so nothing it holds of them is believed. They
    // close, and those assigned again are taken over afresh, from the log.
    const rejoined = previous.member_id !== undefined && view.member_id !== previous.member_id;
    this.reconciling = this.reconciling
      .then(() => (rejoined ? this.closeAll('this node was out of the cluster\'s group') : undefined))
      .then(() => this.reconcile())
      .catch((err: unknown) => this.reconcileFailed(err));
  }

  /** Closes every partition this node leads (none of their state is believed any more). */
  private async closeAll(why: string): Promise<void> {
    if (this.leading.size === 0) return;
    const partitions = [...this.leading].sort((a, b) => a - b);
    this.logger.warn({ code: 'KEEL0802', partitions }, `${why}: the partitions it led close and are taken over afresh where assigned`);
    for (const p of partitions) await this.handOver(p);
  }

  private async handOver(p: number): Promise<void> {
    const started = performance.now();
    await this.hooks.close(p);
    this.leading.delete(p);
    this.log.epochs.delete(p);
    // Its next leader's producer fences this one (transactions): taking it back later builds a new one.
    this.log.forget(p);
    this.logger.info({ partition: p, to: this.view.leaders[p]?.node, took_ms: Math.round(performance.now() - started) }, 'partition handed over');
  }

  /**
   * A takeover that failed for some of `take`. The cluster log out of reach for a moment (a
   * broker restarting, a leader moving): those still assigned here are taken over again in
   * RECONCILE_AGAIN_MS; once such failures have gone on for TAKEOVER_RETRY_LIMIT_MS the node is
   * deposed (throws). A node stopping keeps what opened. With the partitions spread, a node that
   * joined meanwhile may have been given them and announced first: no longer assigned here, they
   * are left to it (the next reconciliation follows them). One still assigned here was taken by a
   * node this one does not know of: it is deposed (throws). Returns the partitions that opened.
   */
  private lostTakeover(take: number[], opened: readonly number[], err: unknown): number[] {
    const failed = take.filter((p) => !opened.includes(p));
    const stillAssigned = failed.filter((p) => this.view.assigned.includes(p));
    const succeeded = take.filter((p) => opened.includes(p));
    if (this.stopping) return succeeded;
    const now = performance.now();
    if (stillAssigned.length > 0 && isTransientKafkaError(err) && now - (this.takeoverFailingSince ??= now) < TAKEOVER_RETRY_LIMIT_MS) {
      const failingMs = Math.round(now - this.takeoverFailingSince);
      this.logger.warn({ err, code: 'KEEL0801', partitions: stillAssigned, failing_ms: failingMs }, `taking over partitions failed: the cluster log cannot be reached now; trying again in ${RECONCILE_AGAIN_MS} ms`);
      this.reconcileSoon();
      return succeeded;
    }
    if (!this.spread || stillAssigned.length > 0) throw err;
    this.takeoverFailingSince = undefined;
    this.logger.warn({ err, code: 'KEEL0802', partitions: failed }, 'another node took partitions this node was taking over (the shares moved meanwhile); this node leads its new share');
    return succeeded;
  }

  /** Brings what this node leads and follows in line with the view it has now. */
  private async reconcile(): Promise<void> {
    if (this.stopping) return;
    const view = this.view;
    const want = new Set(view.assigned);
    for (const p of [...this.leading].filter((p) => !want.has(p))) await this.handOver(p);
    let take = view.assigned.filter((p) => !this.leading.has(p));
    if (take.length === 0) this.takeoverFailingSince = undefined;
    else {
      const started = performance.now();
      for (const p of take) this.taking.add(p);
      await this.stopFollowing(take);
      try {
        const answer = await this.hooks.open(this.log, take);
        if ('failure' in answer) take = this.lostTakeover(take, answer.opened, answer.failure);
        else this.takeoverFailingSince = undefined;
      } finally {
        this.taking.clear();
      }
      if (take.length > 0) await this.led(take, started);
    }
    // Not those assigned here and not led yet: a takeover is tried again for them in a moment.
    const follow = Array.from({ length: this.partitions }, (_, p) => p).filter((p) => !this.leading.has(p) && !this.followers.has(p) && !want.has(p));
    if (follow.length > 0 && !this.stopping) {
      const followers = await this.hooks.follow(this.log, follow).catch((err: unknown) => {
        this.logger.warn({ err, code: 'KEEL0801', partitions: follow }, `cannot follow the partition logs; trying again in ${RECONCILE_AGAIN_MS} ms (meanwhile this node catches up when it takes the lead)`);
        this.reconcileSoon();
        return [];
      });
      for (const f of followers) this.watchFollower(f);
    }
  }

  /** `take` is led from now on (taken over since `started`); the work beside the partitions starts with the first. */
  private async led(take: number[], started: number): Promise<void> {
    for (const p of take) this.leading.add(p);
    // One node leading every partition starts that work once it leads them all (a takeover tried
    // again leaves some unled a moment): the subscriptions read every partition.
    if (!this.workStarted && (this.spread || this.leading.size === this.partitions)) {
      this.workStarted = true;
      this.stopActive = await this.hooks.startWork(this.log);
      this.watchPartitions();
    }
    const epochs = Object.fromEntries(take.map((p) => [p, this.log.epochs.get(p)]));
    this.logger.info({ node: this.self.node, partitions: take, took_ms: Math.round(performance.now() - started), epochs }, this.leading.size === this.partitions ? 'this node is active: it leads every partition' : `this node leads ${this.leading.size} of ${this.partitions} partitions`);
  }

  /** A follower that fails is replaced a moment later (reads on this node leave its partition out meanwhile). */
  private watchFollower(f: Follower): void {
    this.followers.set(f.partition, f);
    void f.ended.then(() => {
      if (this.stopping || this.followers.get(f.partition) !== f) return;
      this.followers.delete(f.partition);
      this.reconcileSoon();
    });
  }

  /** A reconciliation that threw: this node was deposed, unless it is stopping (its clients closed under the takeover). */
  private reconcileFailed(err: unknown): void {
    if (this.stopping) return;
    this.hooks.deposed(`taking the lead failed: ${(err as Error)?.message ?? String(err)}`);
  }

  /** A reconciliation in RECONCILE_AGAIN_MS (one at most waiting): it takes over what is assigned and not led, and follows every other partition not followed now. */
  private reconcileSoon(): void {
    if (this.reconcileTimer !== undefined) return;
    this.reconcileTimer = setTimeout(() => {
      this.reconcileTimer = undefined;
      if (this.stopping) return;
      this.reconciling = this.reconciling.then(() => this.reconcile()).catch((err: unknown) => this.reconcileFailed(err));
    }, RECONCILE_AGAIN_MS);
    this.reconcileTimer.unref();
  }

  /** Stops following these partitions and waits until what was read is in the store (taking the lead reads on from there). */
  private async stopFollowing(partitions: number[]): Promise<void> {
    const stopping = partitions.flatMap((p) => {
      const f = this.followers.get(p);
      this.followers.delete(p);
      if (f === undefined) return [];
      this.announcedSeen.set(p, f.announced_epoch);
      return [f.stop().then(() => void this.announcedSeen.set(p, f.announced_epoch))];
    });
    await Promise.all(stopping);
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
