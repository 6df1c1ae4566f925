// Answers in the three shapes clients ask for, built chunk by chunk from DuckDB's results so
// that the byte limit is checked as the answer grows:
//   json   {"rows":[…]}: nulls omitted, timestamps RFC 3339 with ms and Z, binary as hex
//   arrow  an Arrow IPC stream (strings Utf8, counts Int64, UINTEGER UInt32, timestamps ms
//          "+00:00"), as the restate CLI reads it
//   pg     PostgreSQL RowDescription and DataRow messages in text format

import type { DataType, Field, RecordBatch } from 'apache-arrow';
import { DuckDBTypeId, type DuckDBValue } from '@duckdb/node-api';
import { PG_TYPE, dataRow, rowDescription } from './pg-messages.js';
import type { Format } from './protocol.js';

export type Kind = 'utf8' | 'int' | 'uint' | 'huge' | 'float' | 'bool' | 'ts' | 'binary';
export type Cell = string | number | bigint | boolean | Uint8Array | null;

export interface Column {
  name: string;
  kind: Kind;
  /** DuckDB's type: PostgreSQL clients get the closest pg_type. */
  type: DuckDBTypeId;
}

export function kindOf(type: DuckDBTypeId): Kind {
  switch (type) {
    case DuckDBTypeId.BOOLEAN:
      return 'bool';
    case DuckDBTypeId.TINYINT:
    case DuckDBTypeId.SMALLINT:
    case DuckDBTypeId.INTEGER:
    case DuckDBTypeId.BIGINT:
      return 'int';
    case DuckDBTypeId.UTINYINT:
    case DuckDBTypeId.USMALLINT:
    case DuckDBTypeId.UINTEGER:
    case DuckDBTypeId.UBIGINT:
      return 'uint';
    case DuckDBTypeId.HUGEINT:
    case DuckDBTypeId.UHUGEINT:
    case DuckDBTypeId.BIGNUM:
      return 'huge';
    case DuckDBTypeId.FLOAT:
    case DuckDBTypeId.DOUBLE:
    case DuckDBTypeId.DECIMAL:
      return 'float';
    case DuckDBTypeId.TIMESTAMP:
    case DuckDBTypeId.TIMESTAMP_S:
    case DuckDBTypeId.TIMESTAMP_MS:
    case DuckDBTypeId.TIMESTAMP_NS:
    case DuckDBTypeId.TIMESTAMP_TZ:
      return 'ts';
    case DuckDBTypeId.BLOB:
      return 'binary';
    default:
      return 'utf8';
  }
}

/** The widest instant a JavaScript Date holds, in ms: later or earlier times render as null. */
const MAX_MS = 8.64e15;

function millis(v: object): number | null {
  const t = v as { micros?: bigint; millis?: bigint; seconds?: bigint; nanos?: bigint };
  let ms: number;
  if (t.micros !== undefined) ms = Number(t.micros / 1000n);
  else if (t.millis !== undefined) ms = Number(t.millis);
  else if (t.seconds !== undefined) ms = Number(t.seconds) * 1000;
  else if (t.nanos !== undefined) ms = Number(t.nanos / 1_000_000n);
  else return null;
  return Number.isFinite(ms) && Math.abs(ms) <= MAX_MS ? ms : null;
}

/** A DuckDB value as the encoders take it: timestamps as ms, numbers, bigints, strings, bytes. */
export function cell(kind: Kind, v: DuckDBValue): Cell {
  if (v === null || v === undefined) return null;
  switch (kind) {
    case 'bool':
      return Boolean(v);
    case 'int':
    case 'uint':
    case 'huge':
      return typeof v === 'number' || typeof v === 'bigint' ? v : null;
    case 'float': {
      const n = typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : Number((v as { toDouble?: () => number }).toDouble?.() ?? String(v));
      return Number.isFinite(n) ? n : null;
    }
    case 'ts':
      return typeof v === 'object' ? millis(v) : null;
    case 'binary':
      return (v as { bytes?: Uint8Array }).bytes ?? null;
    case 'utf8':
      return typeof v === 'string' ? v : String(v);
  }
}

const iso = (ms: number): string => new Date(ms).toISOString();

export interface Encoder {
  /** Adds the rows of one chunk (column-major cells); returns the bytes they add to the answer. */
  add(columns: Cell[][], rows: number): number;
  /** The answer: a head (pg RowDescription) and its body in pieces. */
  finish(): { head?: Uint8Array; body: Uint8Array[] };
}

function jsonValue(kind: Kind, v: Exclude<Cell, null>): string {
  switch (kind) {
    case 'utf8':
      return JSON.stringify(v);
    case 'bool':
      return v ? 'true' : 'false';
    case 'ts':
      return `"${iso(v as number)}"`;
    case 'binary':
      return `"${Buffer.from(v as Uint8Array).toString('hex')}"`;
    default:
      return String(v);
  }
}

class JsonEncoder implements Encoder {
  private readonly names: string[];
  private readonly pieces: Buffer[] = [Buffer.from('{"rows":[')];
  private first = true;

  constructor(private readonly columns: Column[]) {
    this.names = columns.map((c) => `${JSON.stringify(c.name)}:`);
  }

  add(columns: Cell[][], rows: number): number {
    const out: string[] = [];
    for (let r = 0; r < rows; r++) {
      const fields: string[] = [];
      for (let c = 0; c < this.columns.length; c++) {
        const v = columns[c]![r]!;
        if (v !== null) fields.push(this.names[c]! + jsonValue(this.columns[c]!.kind, v));
      }
      out.push(`{${fields.join(',')}}`);
    }
    if (out.length === 0) return 0;
    const piece = Buffer.from((this.first ? '' : ',') + out.join(','), 'utf8');
    this.first = false;
    this.pieces.push(piece);
    return piece.length;
  }

  finish(): { body: Uint8Array[] } {
    return { body: [...this.pieces, Buffer.from(']}')] };
  }
}

type Arrow = typeof import('apache-arrow');
let arrowModule: Promise<Arrow> | undefined;
/** apache-arrow takes ~150 ms to load: the engine loads it once it is ready, not before. */
export const loadArrow = (): Promise<Arrow> => (arrowModule ??= import('apache-arrow'));

/** UINTEGER columns (sys_rules' concurrency and version) are UInt32, as Restate's; other unsigned ones UInt64. */
const isUint32 = (c: Column): boolean => c.type === DuckDBTypeId.UINTEGER;

function arrowType(a: Arrow, c: Column): DataType {
  if (isUint32(c)) return new a.Uint32();
  switch (c.kind) {
    case 'utf8':
      return new a.Utf8();
    case 'int':
    case 'huge':
      return new a.Int64();
    case 'uint':
      return new a.Uint64();
    case 'float':
      return new a.Float64();
    case 'bool':
      return new a.Bool();
    case 'ts':
      return new a.Timestamp(a.TimeUnit.MILLISECOND, '+00:00');
    case 'binary':
      return new a.Binary();
  }
}

function arrowValue(c: Column, v: Cell): unknown {
  if (v === null) return null;
  if (isUint32(c)) return Number(v);
  switch (c.kind) {
    case 'int':
    case 'uint':
      return BigInt(v as number | bigint);
    case 'huge': {
      // sums of counters: answered as Int64 (as DataFusion does), null past its range
      const b = BigInt(v as number | bigint);
      return b >= -(2n ** 63n) && b < 2n ** 63n ? b : null;
    }
    default:
      return v;
  }
}

class ArrowEncoder implements Encoder {
  private readonly fields: Field[];
  private readonly batches: RecordBatch[] = [];

  constructor(private readonly a: Arrow, private readonly columns: Column[]) {
    this.fields = columns.map((c) => new a.Field(c.name, arrowType(a, c), true));
  }

  add(columns: Cell[][], rows: number): number {
    const a = this.a;
    const children = this.columns.map((c, i) => a.vectorFromArray(columns[i]!.map((v) => arrowValue(c, v)), arrowType(a, c)).data[0]!);
    const data = a.makeData({ type: new a.Struct(this.fields), length: rows, nullCount: 0, children });
    this.batches.push(new a.RecordBatch(new a.Schema(this.fields), data));
    return children.reduce((n, d) => n + d.byteLength, 0);
  }

  finish(): { body: Uint8Array[] } {
    const a = this.a;
    return { body: [a.tableToIPC(new a.Table(new a.Schema(this.fields), this.batches), 'stream')] };
  }
}

function pgText(kind: Kind, v: Exclude<Cell, null>): string {
  switch (kind) {
    case 'bool':
      return v ? 't' : 'f';
    case 'ts':
      return iso(v as number).replace('T', ' ').replace('Z', '+00');
    case 'binary':
      return `\\x${Buffer.from(v as Uint8Array).toString('hex')}`;
    default:
      return String(v);
  }
}

const PG_OID: Record<Kind, number> = {
  utf8: PG_TYPE.text, int: PG_TYPE.int8, uint: PG_TYPE.numeric, huge: PG_TYPE.numeric, float: PG_TYPE.float8,
  bool: PG_TYPE.bool, ts: PG_TYPE.timestamptz, binary: PG_TYPE.bytea,
};

/** The pg_type of a column: the width of its integers kept (clients read int4 as numbers, int8 as text). */
function pgOid(c: Column): number {
  switch (c.type) {
    case DuckDBTypeId.TINYINT:
    case DuckDBTypeId.SMALLINT:
      return PG_TYPE.int2;
    case DuckDBTypeId.INTEGER:
    case DuckDBTypeId.UTINYINT:
    case DuckDBTypeId.USMALLINT:
      return PG_TYPE.int4;
    case DuckDBTypeId.UINTEGER:
      return PG_TYPE.int8;
    case DuckDBTypeId.FLOAT:
      return PG_TYPE.float4;
    case DuckDBTypeId.DECIMAL:
      return PG_TYPE.numeric;
    case DuckDBTypeId.DATE:
      return PG_TYPE.date;
    default:
      return PG_OID[c.kind];
  }
}

class PgEncoder implements Encoder {
  private readonly pieces: Buffer[] = [];

  constructor(private readonly columns: Column[]) {}

  add(columns: Cell[][], rows: number): number {
    const out: Buffer[] = [];
    for (let r = 0; r < rows; r++) {
      out.push(dataRow(this.columns.map((c, i) => {
        const v = columns[i]![r]!;
        return v === null ? null : pgText(c.kind, v);
      })));
    }
    const piece = Buffer.concat(out);
    this.pieces.push(piece);
    return piece.length;
  }

  finish(): { head: Uint8Array; body: Uint8Array[] } {
    return { head: rowDescription(this.columns.map((c) => ({ name: c.name, oid: pgOid(c) }))), body: this.pieces };
  }
}

export async function encoder(format: Format, columns: Column[]): Promise<Encoder> {
  switch (format) {
    case 'json':
      return new JsonEncoder(columns);
    case 'arrow':
      return new ArrowEncoder(await loadArrow(), columns);
    case 'pg':
      return new PgEncoder(columns);
  }
}

/** Pieces regrouped into chunks of about `size` bytes (one IPC message each). */
export function rechunk(pieces: readonly Uint8Array[], size: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  let group: Uint8Array[] = [];
  let bytes = 0;
  const flush = () => {
    if (group.length > 0) out.push(group.length === 1 ? group[0]! : Buffer.concat(group));
    group = [];
    bytes = 0;
  };
  for (const p of pieces) {
    for (let off = 0; off < p.length; off += size) {
      const part = p.subarray(off, Math.min(p.length, off + size));
      if (bytes + part.length > size) flush();
      group.push(part);
      bytes += part.length;
    }
  }
  flush();
  return out;
}
