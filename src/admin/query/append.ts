// Rows of a per-query table into its temp table through DuckDB's appender: no file to write and
// no JSON to read back (a journal by id took ~8 ms that way). A value that does not fit its
// column's type is NULL, as a TRY_CAST would make it: every stored value renders.

import { DuckDBIntervalValue, DuckDBTimestampValue, type DuckDBAppender, type DuckDBConnection } from '@duckdb/node-api';
import type { ColumnKind, Row, TableSchema } from '../introspection.js';

/** The widest instant the API renders (±100,000,000 days around 1970), in ms. */
const MAX_MS = 8.64e15;
const MAX_UINT32 = (1n << 32n) - 1n;
const MAX_UINT64 = (1n << 64n) - 1n;
const MIN_INT64 = -(1n << 63n);
const MAX_INT64 = (1n << 63n) - 1n;

function integer(v: unknown, min: bigint, max: bigint): bigint | undefined {
  let n: bigint;
  if (typeof v === 'bigint') n = v;
  else if (typeof v === 'number' && Number.isFinite(v)) n = BigInt(Math.round(v));
  else if (typeof v === 'boolean') n = v ? 1n : 0n;
  else if (typeof v === 'string' && /^\s*[+-]?\d+\s*$/.test(v)) n = BigInt(v.trim());
  else return undefined;
  return n >= min && n <= max ? n : undefined;
}

function boolean(v: unknown): boolean | undefined {
  if (typeof v === 'boolean') return v;
  if (typeof v === 'number') return v === 0 ? false : v === 1 ? true : undefined;
  if (typeof v === 'string') return /^(true|t|1)$/i.test(v) ? true : /^(false|f|0)$/i.test(v) ? false : undefined;
  return undefined;
}

function timestamp(v: unknown): DuckDBTimestampValue | undefined {
  const ms = typeof v === 'number' ? v : typeof v === 'string' ? Date.parse(v) : NaN;
  if (!Number.isFinite(ms) || Math.abs(ms) > MAX_MS) return undefined;
  return new DuckDBTimestampValue(BigInt(Math.trunc(ms)) * 1000n);
}

function appendCell(a: DuckDBAppender, kind: ColumnKind, v: unknown): void {
  if (v === null || v === undefined) return a.appendNull();
  switch (kind) {
    case 'utf8':
      return a.appendVarchar(typeof v === 'string' ? v : typeof v === 'object' ? JSON.stringify(v) : String(v));
    case 'int64': {
      const n = integer(v, MIN_INT64, MAX_INT64);
      return n === undefined ? a.appendNull() : a.appendBigInt(n);
    }
    case 'uint32': {
      const n = integer(v, 0n, MAX_UINT32);
      return n === undefined ? a.appendNull() : a.appendUInteger(Number(n));
    }
    case 'uint64': {
      const n = integer(v, 0n, MAX_UINT64);
      return n === undefined ? a.appendNull() : a.appendUBigInt(n);
    }
    case 'float64': {
      const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
      return Number.isNaN(n) ? a.appendNull() : a.appendDouble(n);
    }
    case 'bool': {
      const b = boolean(v);
      return b === undefined ? a.appendNull() : a.appendBoolean(b);
    }
    case 'ts': {
      const t = timestamp(v);
      return t === undefined ? a.appendNull() : a.appendTimestamp(t);
    }
    case 'binary':
      return v instanceof Uint8Array ? a.appendBlob(v) : typeof v === 'string' ? a.appendBlob(Buffer.from(v, 'utf8')) : a.appendNull();
    case 'interval':
      return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? a.appendInterval(new DuckDBIntervalValue(0, 0, BigInt(Math.round(v * 1000)))) : a.appendNull();
  }
}

/**
 * Appends `rows` to `table`, in `schema`'s column order: the temp table of `conn`, or the table of
 * the database schema `into` (then within the caller's transaction, if it has one).
 */
export async function appendRows(conn: DuckDBConnection, table: string, schema: TableSchema, rows: readonly Row[], into?: 'public'): Promise<void> {
  if (rows.length === 0) return;
  const appender = into === undefined ? await conn.createAppender(table, 'main', 'temp') : await conn.createAppender(table, into);
  try {
    for (const row of rows) {
      for (const [column, kind] of schema) appendCell(appender, kind, row[column]);
      appender.endRow();
    }
    appender.flushSync();
  } finally {
    appender.closeSync();
  }
}
