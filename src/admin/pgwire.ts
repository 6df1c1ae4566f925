// The PostgreSQL wire protocol on admin.query_engine.pgsql_bind_address (9071): psql, the `pg`
// driver and BI tools query the same tables as `POST /query`, read-only, with the same limits.
// pg-gateway does startup, SSL refusal and authentication (SCRAM-SHA-256 when a password is
// configured); Keel answers the simple and the extended query protocols. Session commands
// clients send on their own (SET, BEGIN, COMMIT, …) are acknowledged without running.

import net from 'node:net';
import { randomInt } from 'node:crypto';
import type { ScramSha256Data } from 'pg-gateway';
import type { Logger } from '../common/logger.js';
import { loadPackage } from '../common/load-package.js';
import { splitAddress, type QueryEngineConfig } from '../config/index.js';
import { KeelError } from '../errors/index.js';
import { SERVER_VERSION } from './routes/meta.js';
import type { Answer, QueryOptions } from './query/engine.js';
import { CLIENT_CANCELLED, CLIENT_LEFT } from './query/protocol.js';

/** What answers the SQL of pg clients: the query engine, or (on a cluster's standby) the active node through it. */
export interface PgQueries {
  query(sql: string, format: 'pg', opts?: QueryOptions): Promise<Answer>;
}
import {
  PG_TYPE, bindComplete, closeComplete, commandComplete, cstring, dataRow, emptyQueryResponse, errorResponse, message, noData, parameterDescription,
  parseComplete, readyForQuery, rowDescription,
} from './query/pg-messages.js';

/** What clients see as the server's PostgreSQL version (psql picks its catalogue queries by it). */
const SERVER_PG_VERSION = `14.0 (Keel, Restate ${SERVER_VERSION} compatible)`;

/** Connections at once; more are closed at once (each holds little, but there is a bound). */
const MAX_CONNECTIONS = 256;
/** Prepared statements and portals one connection may keep. */
const MAX_NAMED = 1024;
/** CancelRequest: a 16-byte first message (length, this code, the session's process id and secret key). */
const CANCEL_REQUEST_CODE = 80877102;
const CANCEL_REQUEST_BYTES = 16;

/** SQLSTATE of each error code (https://www.postgresql.org/docs/current/errcodes-appendix.html). */
const SQLSTATE: Record<string, string> = {
  KEEL0010: '42601', // syntax_error (also planning and unknown names)
  KEEL0020: '42501', // insufficient_privilege
  KEEL0021: '57014', // query_canceled
  KEEL0022: '54000', // program_limit_exceeded
  KEEL0023: '57P03', // cannot_connect_now
  KEEL0024: '57014', // query_canceled
};

/** What a session command answers as its tag; such commands are not run (there is nothing to set). */
const SESSION_COMMAND = /^\s*(SET|RESET|BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|ABORT|DISCARD|DEALLOCATE|SAVEPOINT|RELEASE|UNLISTEN|LISTEN)\b/i;

function sessionTag(sql: string): string | undefined {
  const m = SESSION_COMMAND.exec(sql);
  if (m === undefined || m === null) return undefined;
  const word = m[1]!.toUpperCase().replace(/\s+/g, ' ');
  if (word === 'START TRANSACTION') return 'START TRANSACTION';
  if (word === 'END' || word === 'ABORT') return word === 'END' ? 'COMMIT' : 'ROLLBACK';
  return word;
}

/**
 * psql's describe commands spell operators and collations the PostgreSQL way, which DuckDB's
 * parser does not read: `OPERATOR(pg_catalog.~)` is `~`, `COLLATE pg_catalog.default` is nothing.
 */
function psqlDialect(sql: string): string {
  return sql.replace(/OPERATOR\(pg_catalog\.([~!<>=]+)\)/g, '$1').replace(/\s+COLLATE\s+pg_catalog\.default\b/g, '');
}

/** ParameterStatus messages clients read to decode text: sent before the first answer. */
const PARAMETERS: Array<[string, string]> = [
  ['client_encoding', 'UTF8'], ['server_encoding', 'UTF8'], ['DateStyle', 'ISO, MDY'], ['TimeZone', 'UTC'],
  ['integer_datetimes', 'on'], ['standard_conforming_strings', 'on'], ['application_name', ''],
];

class Reader {
  private at = 5;
  constructor(private readonly buf: Buffer) {}
  cstring(): string {
    const end = this.buf.indexOf(0, this.at);
    const s = this.buf.toString('utf8', this.at, end < 0 ? this.buf.length : end);
    this.at = end < 0 ? this.buf.length : end + 1;
    return s;
  }
  int16(): number {
    const v = this.buf.readInt16BE(this.at);
    this.at += 2;
    return v;
  }
  int32(): number {
    const v = this.buf.readInt32BE(this.at);
    this.at += 4;
    return v;
  }
  bytes(n: number): Buffer {
    const b = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return b;
  }
  byte(): string {
    return String.fromCharCode(this.buf[this.at++] ?? 0);
  }
}

interface Statement {
  sql: string;
  paramTypes: number[];
}

interface Portal {
  sql: string;
  params: Array<string | null>;
  /** The answer, once Describe ran it (Execute then sends its rows). */
  answer?: { rows: number; head?: Uint8Array; body: Uint8Array[] };
}

const countParams = (sql: string): number => Math.max(0, ...[...sql.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));

/** One client connection's protocol state. */
class Session {
  private readonly statements = new Map<string, Statement>();
  private readonly portals = new Map<string, Portal>();
  private skipToSync = false;
  private greeted = false;
  /** The query running now: aborted by a cancel request or by the connection closing. */
  private running: AbortController | undefined;

  constructor(
    private readonly engine: PgQueries,
    private readonly logger: Logger,
    /** What the client's cancel request names this session by (BackendKeyData). */
    readonly processId: number,
    readonly secretKey: number,
  ) {}

  /**
   * BackendKeyData: what the client's cancel requests name this session by. Sent at startup,
   * after AuthenticationOk, where clients take it (psql copies it before each query is sent).
   */
  backendKeyData(): Buffer {
    const key = Buffer.alloc(8);
    key.writeInt32BE(this.processId, 0);
    key.writeInt32BE(this.secretKey, 4);
    return message('K', key);
  }

  /** Stops the running query, if any: it answers query_canceled (57014). */
  cancel(reason: typeof CLIENT_CANCELLED | typeof CLIENT_LEFT): void {
    this.running?.abort(reason);
  }

  async *handle(data: Uint8Array): AsyncGenerator<Uint8Array> {
    if (!this.greeted) {
      this.greeted = true;
      for (const [k, v] of PARAMETERS) yield message('S', Buffer.concat([cstring(k), cstring(v)]));
    }
    const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const type = String.fromCharCode(buf[0]!);
    const r = new Reader(buf);
    if (type === 'S') {
      this.skipToSync = false;
      yield readyForQuery();
      return;
    }
    if (type === 'Q') {
      yield* this.simple(r.cstring());
      return;
    }
    if (this.skipToSync) return;
    try {
      yield* this.extended(type, r);
    } catch (err) {
      this.skipToSync = true;
      yield this.error(err);
    }
  }

  private error(err: unknown): Buffer {
    if (err instanceof KeelError) return errorResponse(SQLSTATE[err.code] ?? 'XX000', err.display);
    this.logger.error({ err, code: 'RT0006' }, 'pgsql: a query failed unexpectedly');
    return errorResponse('XX000', `[RT0006] internal error: ${(err as Error)?.message ?? String(err)}`);
  }

  private async run(sql: string, params: Array<string | null> | undefined): Promise<{ rows: number; head?: Uint8Array; body: Uint8Array[] }> {
    const show = /^\s*SHOW\s+([A-Za-z_]+)\s*;?\s*$/i.exec(sql)?.[1]?.toLowerCase();
    if (show !== undefined) return this.show(show);
    const running = new AbortController();
    this.running = running;
    try {
      const answer = await this.engine.query(psqlDialect(sql), 'pg', { ...(params ? { params } : {}), signal: running.signal });
      const body: Uint8Array[] = [];
      for await (const chunk of answer.body) body.push(chunk);
      return { rows: answer.rows, ...(answer.head ? { head: answer.head } : {}), body };
    } finally {
      this.running = undefined;
    }
  }

  /** `SHOW name` of a parameter the server reports (server_version, client_encoding, …). */
  private show(name: string): { rows: number; head: Uint8Array; body: Uint8Array[] } {
    const value = name === 'server_version' ? SERVER_PG_VERSION : PARAMETERS.find(([k]) => k.toLowerCase() === name)?.[1];
    if (value === undefined) throw new KeelError('KEEL0010', `unrecognized configuration parameter "${name}"`);
    return { rows: 1, head: rowDescription([{ name, oid: PG_TYPE.text }]), body: [dataRow([value])] };
  }

  /** Simple query: one statement (the engine refuses more), its rows, then ReadyForQuery. */
  private async *simple(sql: string): AsyncGenerator<Uint8Array> {
    try {
      const tag = sessionTag(sql);
      if (sql.trim().replace(/;+$/, '').trim() === '') yield emptyQueryResponse();
      else if (tag !== undefined) yield commandComplete(tag);
      else {
        const a = await this.run(sql, undefined);
        if (a.head) yield a.head;
        yield* a.body;
        yield commandComplete(`SELECT ${a.rows}`);
      }
    } catch (err) {
      yield this.error(err);
    }
    yield readyForQuery();
  }

  private async *extended(type: string, r: Reader): AsyncGenerator<Uint8Array> {
    switch (type) {
      case 'P':
        yield this.parse(r);
        return;
      case 'B':
        yield this.bind(r);
        return;
      case 'D':
        yield* this.describe(r);
        return;
      case 'E':
        yield* this.execute(r);
        return;
      case 'C': {
        const kind = r.byte();
        const name = r.cstring();
        if (kind === 'S') this.statements.delete(name);
        else this.portals.delete(name);
        yield closeComplete();
        return;
      }
      case 'H':
        return;
      default:
        throw new KeelError('KEEL0020', `the protocol message '${type}' is not supported (COPY and function calls are not)`);
    }
  }

  private parse(r: Reader): Uint8Array {
    const name = r.cstring();
    const sql = r.cstring();
    const n = r.int16();
    const paramTypes = Array.from({ length: n }, () => r.int32());
    if (this.statements.size >= MAX_NAMED && !this.statements.has(name)) throw new KeelError('KEEL0022', `more than ${MAX_NAMED} prepared statements on one connection`);
    this.statements.set(name, { sql, paramTypes });
    return parseComplete();
  }

  private bind(r: Reader): Uint8Array {
    const portal = r.cstring();
    const statement = this.statements.get(r.cstring());
    if (statement === undefined) throw new KeelError('KEEL0010', 'unknown prepared statement');
    const formats = Array.from({ length: r.int16() }, () => r.int16());
    const params = Array.from({ length: r.int16() }, (_, i) => {
      const len = r.int32();
      if (len < 0) return null;
      const raw = r.bytes(len);
      if ((formats[i] ?? formats[0] ?? 0) === 1) throw new KeelError('KEEL0010', 'binary parameters are not supported: send them as text');
      return raw.toString('utf8');
    });
    if (this.portals.size >= MAX_NAMED && !this.portals.has(portal)) throw new KeelError('KEEL0022', `more than ${MAX_NAMED} portals on one connection`);
    this.portals.set(portal, { sql: statement.sql, params });
    return bindComplete();
  }

  private async *describe(r: Reader): AsyncGenerator<Uint8Array> {
    const kind = r.byte();
    const name = r.cstring();
    if (kind === 'S') {
      const s = this.statements.get(name);
      if (s === undefined) throw new KeelError('KEEL0010', 'unknown prepared statement');
      const n = Math.max(s.paramTypes.length, countParams(s.sql));
      yield parameterDescription(Array.from({ length: n }, (_, i) => s.paramTypes[i] || 25));
      if (sessionTag(s.sql) !== undefined) yield noData();
      else {
        const a = await this.run(s.sql, n > 0 ? Array.from({ length: n }, () => null) : undefined);
        yield a.head ?? noData();
      }
      return;
    }
    const p = this.portals.get(name);
    if (p === undefined) throw new KeelError('KEEL0010', 'unknown portal');
    if (sessionTag(p.sql) !== undefined || p.sql.trim() === '') {
      yield noData();
      return;
    }
    p.answer = await this.run(p.sql, p.params);
    yield p.answer.head ?? noData();
  }

  private async *execute(r: Reader): AsyncGenerator<Uint8Array> {
    const p = this.portals.get(r.cstring());
    if (p === undefined) throw new KeelError('KEEL0010', 'unknown portal');
    const tag = sessionTag(p.sql);
    if (tag !== undefined) yield commandComplete(tag);
    else if (p.sql.trim() === '') yield emptyQueryResponse();
    else {
      const a = p.answer ?? (await this.run(p.sql, p.params));
      p.answer = undefined;
      yield* a.body;
      yield commandComplete(`SELECT ${a.rows}`);
    }
  }
}

/**
 * When `data` is a CancelRequest: cancels the query of the session it names, if the secret key
 * matches (PostgreSQL answers nothing either way, so that keys cannot be probed), and says so.
 */
function cancelRequest(data: Uint8Array, sessions: ReadonlyMap<number, Session>, log: Logger): boolean {
  const first = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (first.length !== CANCEL_REQUEST_BYTES || first.readInt32BE(0) !== CANCEL_REQUEST_BYTES || first.readInt32BE(4) !== CANCEL_REQUEST_CODE) return false;
  const session = sessions.get(first.readInt32BE(8));
  if (session === undefined || session.secretKey !== first.readInt32BE(12)) {
    log.info({ code: 'KEEL0024' }, 'pgsql: a cancel request named no session of this server; ignored');
    return true;
  }
  log.info({ code: 'KEEL0024', process_id: session.processId }, 'pgsql: a client cancelled its query');
  session.cancel(CLIENT_CANCELLED);
  return true;
}

/** pg-gateway loads on the first connection: a server no PostgreSQL client talks to starts without it. */
let gateway: Promise<[typeof import('pg-gateway'), typeof import('pg-gateway/node')]> | undefined;
const loadGateway = () => (gateway ??= Promise.all([loadPackage<typeof import('pg-gateway')>('pg-gateway'), loadPackage<typeof import('pg-gateway/node')>('pg-gateway/node')]));

export interface PgServer {
  address: string;
  close(): Promise<void>;
}

/** Listens on pgsql_bind_address; RT0004 when it cannot bind. */
export async function startPgServer(config: QueryEngineConfig, engine: PgQueries, logger: Logger): Promise<PgServer> {
  const log = logger.child({ component: 'pgsql' });
  const password = config.pgsql_password;
  let scram: Promise<ScramSha256Data> | undefined;
  const sockets = new Set<net.Socket>();
  /** Sessions by process id, for cancel requests (as many as connections: MAX_CONNECTIONS). */
  const sessions = new Map<number, Session>();
  let processIds = 0;
  const server = net.createServer((socket) => {
    if (sockets.size >= MAX_CONNECTIONS) {
      socket.destroy();
      return;
    }
    sockets.add(socket);
    socket.on('error', () => socket.destroy());
    const session = new Session(engine, log, (processIds = (processIds % 0x7fffffff) + 1), randomInt(0x7fffffff));
    socket.on('close', () => {
      sockets.delete(socket);
      if (sessions.get(session.processId) === session) sessions.delete(session.processId);
      session.cancel(CLIENT_LEFT);
    });
    serve(socket, session);
  });
  const serve = (socket: net.Socket, session: Session): void => {
    loadGateway()
      .then(([{ closeSignal, createScramSha256Data }, { fromNodeSocket }]) =>
        fromNodeSocket(socket, {
          serverVersion: SERVER_PG_VERSION,
          auth: password === undefined ? { method: 'trust' } : { method: 'scram-sha-256', getScramSha256Data: () => (scram ??= createScramSha256Data(password)) },
          // pg-gateway has awaited its write of AuthenticationOk here and writes ReadyForQuery
          // after: the key goes between them, where a PostgreSQL server sends it.
          onAuthenticated() {
            sessions.set(session.processId, session);
            socket.write(session.backendKeyData());
          },
          onMessage(data, state) {
            // A cancel request comes on a connection of its own, as its first message (after an
            // SSLRequest where the client asks for TLS first) and alone: pg-gateway does not know
            // it. It is answered as PostgreSQL does: nothing, and the connection closed (by
            // pg-gateway, on its close signal: a socket ended here, it would still write to it).
            if (!state.hasStarted && cancelRequest(data, sessions, log)) return [closeSignal as unknown as Uint8Array];
            if (!state.isAuthenticated || data[0] === 0x58 /* Terminate: pg-gateway closes */) return undefined;
            return session.handle(data);
          },
        }),
      )
      .catch((err) => {
        log.warn({ err, code: 'KEEL0001' }, 'pgsql connection failed');
        socket.destroy();
      });
  };
  const { host, port } = splitAddress(config.pgsql_bind_address);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      const code = err.code;
      const why = code === 'EADDRINUSE' ? 'address in use' : code === 'EADDRNOTAVAIL' ? 'address not available' : code === 'EACCES' || code === 'EPERM' ? 'permission denied' : err.message;
      reject(new KeelError('RT0004', `cannot bind the pgsql address ${config.pgsql_bind_address}: ${why}`, { cause: err }));
    });
    server.listen({ host, port }, () => resolve());
  });
  const bound = server.address() as net.AddressInfo;
  return {
    address: `${bound.address}:${bound.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
