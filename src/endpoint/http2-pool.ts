import http2 from 'node:http2';

/** How the pool keeps HTTP/2 connections to endpoints (Restate's defaults in brackets). */
export interface Http2PoolOptions {
  /** Streams one connection carries at most [128]; the peer's own limit lowers it. */
  streams_per_connection_limit: number;
  /** A connection that has not connected by then fails its streams [10 s]. */
  connect_timeout_ms: number;
  /** A PING goes out this often on every connection [40 s] … */
  keep_alive_interval_ms: number;
  /** … and a connection whose PING is not answered in time is closed [20 s]. */
  keep_alive_timeout_ms: number;
  /** A connection without streams for this long is closed [5 min]; 0 keeps it. */
  idle_timeout_ms: number;
  initial_stream_window_bytes: number;
  initial_connection_window_bytes: number;
}

export const DEFAULT_HTTP2_POOL_OPTIONS: Http2PoolOptions = {
  streams_per_connection_limit: 128,
  connect_timeout_ms: 10_000,
  keep_alive_interval_ms: 40_000,
  keep_alive_timeout_ms: 20_000,
  idle_timeout_ms: 300_000,
  initial_stream_window_bytes: 2 * 1024 * 1024,
  initial_connection_window_bytes: 5 * 1024 * 1024,
};

/**
 * Node counts bytes queued for sending on any stream towards the session's memory, and over
 * `maxSessionMemory` it refuses every new stream with ENHANCE_YOUR_CALM. Writes are chunked
 * with back-pressure (see `writeChunked`), so what is queued stays far below this; the margin
 * covers received data waiting in the connection window.
 */
const MAX_SESSION_MEMORY_MB = 64;
/** Resets a connection may send per second, and in a burst (nghttp2 servers allow 33/s, 1000). */
const RESETS_PER_SECOND = 20;
const RESET_BURST = 200;
const MAX_CONNECTIONS_PER_ORIGIN = 256;

/** One pooled connection: how many streams it carries, whether it may take more. */
export class Connection {
  active = 0;
  draining = false;
  /** GOAWAY's last stream id: streams above it were never processed. */
  last_processed_stream_id = Number.POSITIVE_INFINITY;
  private idle: NodeJS.Timeout | undefined;
  private keepAlive: NodeJS.Timeout | undefined;
  private resetTokens = RESET_BURST;
  private resetRefilledAt_ms = Date.now();

  constructor(
    readonly session: http2.ClientHttp2Session,
    private readonly options: Http2PoolOptions,
    private readonly onGone: (c: Connection) => void,
  ) {
    session.unref();
    const connectTimer = setTimeout(
      () => session.destroy(new Error(`could not connect within ${options.connect_timeout_ms} ms`)),
      options.connect_timeout_ms,
    );
    connectTimer.unref();
    session.once('connect', () => {
      clearTimeout(connectTimer);
      session.setLocalWindowSize(options.initial_connection_window_bytes);
      this.armKeepAlive();
    });
    session.on('goaway', (_code: number, lastStreamID: number) => {
      this.last_processed_stream_id = lastStreamID;
      this.drain();
    });
    session.on('error', () => this.drain());
    session.once('close', () => {
      clearTimeout(connectTimer);
      clearTimeout(this.idle);
      clearTimeout(this.keepAlive);
      this.drain();
    });
  }

  get capacity(): number {
    const peer = this.session.remoteSettings?.maxConcurrentStreams ?? this.options.streams_per_connection_limit;
    return Math.min(this.options.streams_per_connection_limit, peer);
  }

  get usable(): boolean {
    return !this.draining && !this.session.closed && !this.session.destroyed && this.active < this.capacity;
  }

  opened(): void {
    this.active += 1;
    clearTimeout(this.idle);
  }

  closed(): void {
    this.active -= 1;
    if (this.active < 0) throw new Error('pooled connection: more streams closed than opened');
    if (this.active === 0 && this.draining) this.session.close();
    else if (this.active === 0 && this.options.idle_timeout_ms > 0) {
      this.idle = setTimeout(() => {
        this.drain();
        this.session.close();
      }, this.options.idle_timeout_ms);
      this.idle.unref();
    }
  }

  /** No new streams; the open ones finish. */
  drain(): void {
    if (this.draining) return;
    this.draining = true;
    this.onGone(this);
    if (this.active === 0 && !this.session.destroyed) this.session.close();
  }

  /**
   * Whether a stream may be reset now. Endpoints on nghttp2 close the whole connection (GOAWAY
   * INTERNAL_ERROR) when resets arrive faster than they allow; past the budget a stream is
   * ended gracefully instead and its answer discarded.
   */
  takeResetToken(): boolean {
    const now_ms = Date.now();
    this.resetTokens = Math.min(RESET_BURST, this.resetTokens + ((now_ms - this.resetRefilledAt_ms) * RESETS_PER_SECOND) / 1000);
    this.resetRefilledAt_ms = now_ms;
    if (this.resetTokens < 1) return false;
    this.resetTokens -= 1;
    return true;
  }

  private armKeepAlive(): void {
    if (this.options.keep_alive_interval_ms <= 0) return;
    this.keepAlive = setTimeout(() => {
      if (this.session.closed || this.session.destroyed) return;
      const deadline = setTimeout(
        () => this.session.destroy(new Error(`keep-alive PING not answered within ${this.options.keep_alive_timeout_ms} ms`)),
        this.options.keep_alive_timeout_ms,
      );
      deadline.unref();
      const sent = this.session.ping((err) => {
        clearTimeout(deadline);
        if (err === null) this.armKeepAlive();
      });
      if (!sent) clearTimeout(deadline);
    }, this.options.keep_alive_interval_ms);
    this.keepAlive.unref();
  }
}

/** A stream opened by the pool, with what it needs to tell a refusal from a failure. */
export interface PooledStream {
  stream: http2.ClientHttp2Stream;
  connection: Connection;
}

/**
 * HTTP/2 connections to endpoints, per origin: a stream goes on a connection with room for it,
 * a new connection opens when none has room, a connection that received GOAWAY takes no new
 * streams and closes once its streams are done, idle ones close after a while.
 */
export class Http2Pool {
  private readonly byOrigin = new Map<string, Connection[]>();

  constructor(private readonly options: Http2PoolOptions = DEFAULT_HTTP2_POOL_OPTIONS) {}

  request(origin: string, headers: http2.OutgoingHttpHeaders): PooledStream {
    const connection = this.connectionFor(origin);
    const stream = connection.session.request(headers, { endStream: false });
    connection.opened();
    stream.once('close', () => connection.closed());
    return { stream, connection };
  }

  /** Connections per origin, for tests and introspection. */
  connections(origin: string): number {
    return this.byOrigin.get(origin)?.length ?? 0;
  }

  /** Open connections and the streams they carry, over every origin (read at metrics scrape time). */
  stats(): { connections: number; streams: number } {
    let connections = 0;
    let streams = 0;
    for (const list of this.byOrigin.values()) {
      connections += list.length;
      for (const c of list) streams += c.active;
    }
    return { connections, streams };
  }

  close(): void {
    for (const list of this.byOrigin.values()) for (const c of [...list]) c.session.close();
    this.byOrigin.clear();
  }

  private connectionFor(origin: string): Connection {
    const list = this.byOrigin.get(origin) ?? [];
    // Fill the busiest connection that has room: fewer connections, and idle ones can close.
    let best: Connection | undefined;
    for (const c of list) if (c.usable && (best === undefined || c.active > best.active)) best = c;
    if (best !== undefined) return best;
    if (list.length >= MAX_CONNECTIONS_PER_ORIGIN) {
      // Every connection is full: stack on the least busy; HTTP/2 queues what the peer cannot take yet.
      let least = list[0]!;
      for (const c of list) if (c.active < least.active) least = c;
      return least;
    }
    const session = http2.connect(origin, {
      maxSessionMemory: MAX_SESSION_MEMORY_MB,
      settings: { enablePush: false, initialWindowSize: this.options.initial_stream_window_bytes },
    });
    const connection = new Connection(session, this.options, (gone) => {
      const current = this.byOrigin.get(origin);
      if (current === undefined) return;
      const rest = current.filter((c) => c !== gone);
      if (rest.length === 0) this.byOrigin.delete(origin);
      else this.byOrigin.set(origin, rest);
    });
    list.push(connection);
    this.byOrigin.set(origin, list);
    return connection;
  }
}
