// Messages between the server and its query engine process (child_process IPC, "advanced"
// serialization: Uint8Arrays cross as bytes). The server owns the data; the engine owns DuckDB.

import { KeelError } from '../../errors/index.js';
import type { RawJournalEntry, Row, StepAttempts, TableFilter } from '../introspection.js';

/** How an answer is encoded: `{"rows":[…]}`, an Arrow IPC stream, or PostgreSQL wire messages. */
export type Format = 'json' | 'arrow' | 'pg';

export interface EngineOptions {
  /** A directory of the engine's own: its DuckDB file, spill files, files it loads. */
  dir: string;
  memory_limit_bytes: number;
  threads: number;
  max_result_rows: number;
  max_result_bytes: number;
  /** Rows written lately that the copy finds by rowid, past which they are forgotten (engine-main's `forgetRecent`). */
  recent_statuses: number;
  /** The copy gets an index on id when it holds at most this many statuses, and loses it past 1.25 times that; 0: never. */
  indexed_statuses: number;
}

/** The error a query ends with: a catalogue code (which gives its HTTP status) and the message. */
export interface QueryError {
  code: 'KEEL0010' | 'KEEL0020' | 'KEEL0021' | 'KEEL0022' | 'KEEL0023' | 'KEEL0024';
  message: string;
}

/** How a query whose client went away ends, whichever side stops it first. */
export const CLIENT_LEFT: QueryError = { code: 'KEEL0024', message: 'the query was cancelled: its client went away' };

/** How a query ends that its pg client cancelled (psql's Ctrl-C: a CancelRequest on another connection). */
export const CLIENT_CANCELLED: QueryError = { code: 'KEEL0024', message: 'the query was cancelled by its client (a cancel request)' };

/** The error of a query whose signal aborted: the abort's reason when it is one of the above, else CLIENT_LEFT. */
export function abandoned(reason: unknown): QueryError {
  return reason === CLIENT_CANCELLED ? CLIENT_CANCELLED : CLIENT_LEFT;
}

/** A query's error as the server throws it (HTTP and pg answers are made from it). */
export const queryFailure = (e: QueryError): KeelError => new KeelError(e.code, e.message);

/** Stored journals by invocation id, with the attempts of their `ctx.run` steps where known. */
export type Journals = Array<[id: string, entries: RawJournalEntry[], steps?: StepAttempts]>;

export type ToEngine =
  | { t: 'init'; options: EngineOptions }
  /** The copy of the invocation statuses is rebuilt from here on (it starts empty). */
  | { t: 'load-begin' }
  /** Statuses of durable batches as stored (JSON), and purged ids. Answered by `applied`. */
  | { t: 'changes'; seq: number; records: Uint8Array[]; deleted: string[] }
  /**
   * Statuses of the initial scan as stored, one per line: taken only for ids no change has
   * touched since load-begin (changes are newer). Answered by `applied`.
   */
  | { t: 'load'; seq: number; lines: Uint8Array }
  | { t: 'load-end'; seq: number }
  /**
   * `timeout_ms`: what is left of the query's time (`limit_ms`, as configured) after it waited
   * here. `registry_version`: the schema registry's, for the tables kept from it (REGISTRY_TABLES).
   */
  | {
      t: 'query';
      qid: number;
      sql: string;
      format: Format;
      params: Array<string | null> | undefined;
      timeout_ms: number;
      limit_ms: number;
      registry_version: number;
      /** The journals its shape reads (`journal-ids`), read just before it was sent: no `need-journals` for them. */
      journals?: Journals;
    }
  /** The rows of a table filled per query (answer to `need`); `error` when it could not be read. */
  | { t: 'rows'; qid: number; table: string; rows: Row[]; error?: QueryError }
  /** Stored journals (answer to `need-journals`), in the order asked. */
  | { t: 'journals'; qid: number; journals: Journals }
  /** The server wants the next chunk of an answer. */
  | { t: 'more'; qid: number }
  /** The client went away: stop the query. */
  | { t: 'cancel'; qid: number };

export type FromEngine =
  | { t: 'ready' }
  | { t: 'applied'; seq: number }
  | { t: 'need'; qid: number; table: string; filter: TableFilter }
  | { t: 'need-journals'; qid: number; ids: string[] }
  /**
   * Texts of the shape `key` (shape.ts) read sys_journal for exactly the ids their literals at
   * these positions hold: the server reads those journals and sends them with each such query.
   */
  | { t: 'journal-ids'; key: string; literals: number[] }
  /**
   * An answer: its first chunk and whether more follow (each asked for with `more`). For `pg`,
   * `head` is the RowDescription message and the chunks are DataRow messages. `constant`: the
   * query reads only the information_schema copies and calls only functions DuckDB marks
   * CONSISTENT, so its answer (per text, format and parameters) holds until the engine restarts.
   */
  | { t: 'answer'; qid: number; rows: number; head?: Uint8Array; chunk: Uint8Array; more: boolean; constant?: true }
  | { t: 'chunk'; qid: number; chunk: Uint8Array; more: boolean }
  | { t: 'failed'; qid: number; error: QueryError }
  | { t: 'log'; level: 'info' | 'warn' | 'error'; code?: string; msg: string; fields?: Record<string, unknown> };
