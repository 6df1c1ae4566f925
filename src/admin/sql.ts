// `POST /query`: the restate CLI's DataFusion-dialect SQL, run on SQLite (sql.js, WebAssembly)
// over an in-memory database built from the live data for each query. A few DataFusion
// constructs SQLite lacks are rewritten on a token stream (never inside string literals):
//
//   information_schema.columns|tables      → information_schema_columns|tables
//   index (identifier; a keyword in SQLite) → "index"
//   CAST(x AS STRING|VARCHAR|UTF8)          → CAST(x AS TEXT)
//   CAST(x AS INT|BIGINT UNSIGNED)          → CAST(x AS UINT64)          (integer affinity)
//   CAST(x AS TIMESTAMP)                    → CAST(x AS TIMESTAMP_TEXT)  (text affinity)
//   FIRST_VALUE(x ORDER BY y [ASC])         → keel_first_by(x, y)        (custom aggregate)
//   FIRST_VALUE(x ORDER BY y DESC)          → keel_first_by_desc(x, y)
//   LAST_VALUE(x ORDER BY y [ASC|DESC])     → keel_first_by_desc|keel_first_by(x, y)
//   first_value(x) / last_value(x) (no OVER)→ keel_first(x) / keel_last(x)
//   FROM (SELECT … FROM t inv …) WHERE inv.x → FROM (…) AS inv WHERE inv.x
//                                              (DataFusion lets the outer query use the inner alias)
//
// Result columns get a kind (utf8, int64, uint64, float64, bool, ts, binary) from the outer
// select list: a column reference takes the kind its schema declares, COUNT is int64, a
// comparison is bool, CAST the target type, MIN/MAX/FIRST_VALUE their argument's; anything
// else is inferred from the values.

import type { Database, SqlJsStatic, SqlValue } from 'sql.js';
import type { DataType } from 'apache-arrow';
import { InvocationId } from '../common/ids.js';
import { KeelError } from '../errors/index.js';
import type { Registry } from '../metadata/registry.js';
import type { InvocationStatus } from '../partition/state.js';
import {
  INFORMATION_SCHEMA_COLUMNS, INFORMATION_SCHEMA_TABLES, TABLES, deploymentRows, invocationRow, invocationStatusRow,
  journalRowToSql, promiseRow, serviceRows, stateRow, subscriptionPartitionRows, ts, type ColumnKind, type IntrospectionSource, type Row, type TableSchema,
} from './introspection.js';

// ---------------------------------------------------------------------------------------------
// Tokenizer

type TokenType = 'ws' | 'comment' | 'string' | 'qident' | 'ident' | 'number' | 'op';
export interface Token {
  t: TokenType;
  v: string;
}

const OPS = ['==', '!=', '<>', '<=', '>=', '||', '::', '->'];

export function tokenize(sql: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i]!;
    const start = i;
    if (/\s/.test(c)) {
      while (i < n && /\s/.test(sql[i]!)) i++;
      out.push({ t: 'ws', v: sql.slice(start, i) });
    } else if (c === '-' && sql[i + 1] === '-') {
      while (i < n && sql[i] !== '\n') i++;
      out.push({ t: 'comment', v: sql.slice(start, i) });
    } else if (c === '/' && sql[i + 1] === '*') {
      const end = sql.indexOf('*/', i + 2);
      if (end < 0) throw new KeelError('KEEL0010', 'SQL error: ParserError("Unterminated block comment")');
      i = end + 2;
      out.push({ t: 'comment', v: sql.slice(start, i) });
    } else if (c === "'" || c === '"' || c === '`') {
      i++;
      for (;;) {
        if (i >= n) throw new KeelError('KEEL0010', `SQL error: TokenizerError("Unterminated ${c === "'" ? 'string literal' : 'delimited identifier'} at position ${start}")`);
        if (sql[i] === c) {
          if (sql[i + 1] === c) {
            i += 2;
            continue;
          }
          i++;
          break;
        }
        i++;
      }
      out.push({ t: c === "'" ? 'string' : 'qident', v: sql.slice(start, i) });
    } else if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(sql[i + 1] ?? ''))) {
      while (i < n && /[0-9.eE]/.test(sql[i]!)) {
        if ((sql[i] === 'e' || sql[i] === 'E') && (sql[i + 1] === '+' || sql[i + 1] === '-')) i++;
        i++;
      }
      out.push({ t: 'number', v: sql.slice(start, i) });
    } else if (/[A-Za-z_]/.test(c)) {
      while (i < n && /[A-Za-z0-9_$]/.test(sql[i]!)) i++;
      out.push({ t: 'ident', v: sql.slice(start, i) });
    } else {
      const two = sql.slice(i, i + 2);
      if (OPS.includes(two)) i += 2;
      else i++;
      out.push({ t: 'op', v: sql.slice(start, i) });
    }
  }
  return out;
}

const sig = (tok: Token | undefined) => tok !== undefined && tok.t !== 'ws' && tok.t !== 'comment';
const isKw = (tok: Token | undefined, ...kws: string[]) => tok?.t === 'ident' && kws.includes(tok.v.toUpperCase());
const isOp = (tok: Token | undefined, op: string) => tok?.t === 'op' && tok.v === op;

function nextSig(toks: Token[], i: number): number {
  let j = i + 1;
  while (j < toks.length && !sig(toks[j])) j++;
  return j;
}

function prevSig(toks: Token[], i: number): number {
  let j = i - 1;
  while (j >= 0 && !sig(toks[j])) j--;
  return j;
}

/** Index of the `)` matching the `(` at `open`, or -1. */
function matching(toks: Token[], open: number): number {
  let depth = 0;
  for (let i = open; i < toks.length; i++) {
    const tok = toks[i]!;
    if (tok.t !== 'op') continue;
    if (tok.v === '(') depth++;
    else if (tok.v === ')') {
      depth--;
      if (depth === 0) return i;
    }
  }
  return -1;
}

const CLAUSE_KEYWORDS = new Set([
  'WHERE', 'GROUP', 'ORDER', 'LIMIT', 'OFFSET', 'HAVING', 'JOIN', 'LEFT', 'RIGHT', 'INNER', 'OUTER', 'CROSS', 'FULL',
  'NATURAL', 'UNION', 'EXCEPT', 'INTERSECT', 'ON', 'USING', 'WINDOW', 'FROM', 'SELECT', 'AS', 'AND', 'OR', 'NOT',
  'IS', 'IN', 'LIKE', 'BETWEEN', 'NULL', 'TRUE', 'FALSE', 'CASE', 'WHEN', 'THEN', 'ELSE', 'END', 'ASC', 'DESC',
]);

// ---------------------------------------------------------------------------------------------
// Rewrites

function castType(typeText: string): string | undefined {
  const t = typeText.replace(/\s+/g, ' ').trim().toUpperCase();
  if (['STRING', 'VARCHAR', 'UTF8', 'TEXT', 'CHAR', 'LARGEUTF8'].includes(t)) return 'TEXT';
  if (/^(TINYINT|SMALLINT|INT|INTEGER|BIGINT) UNSIGNED$/.test(t) || /^UINT(8|16|32|64)$/.test(t)) return 'UINT64';
  if (['INT', 'INTEGER', 'BIGINT', 'SMALLINT', 'TINYINT', 'INT64', 'INT32'].includes(t)) return 'INTEGER';
  if (t === 'TIMESTAMP' || t === 'DATETIME' || t === 'TIMESTAMPTZ') return 'TIMESTAMP_TEXT';
  if (['DOUBLE', 'FLOAT', 'REAL', 'DOUBLE PRECISION', 'FLOAT64', 'FLOAT32', 'DECIMAL'].includes(t)) return 'REAL';
  if (t === 'BOOLEAN' || t === 'BOOL') return 'BOOLEAN';
  if (t === 'BYTEA' || t === 'BINARY' || t === 'VARBINARY' || t === 'BLOB') return 'BLOB';
  return undefined;
}

function rewriteCasts(toks: Token[]): void {
  for (let i = 0; i < toks.length; i++) {
    if (!isKw(toks[i], 'CAST', 'TRY_CAST')) continue;
    const open = nextSig(toks, i);
    if (!isOp(toks[open], '(')) continue;
    const close = matching(toks, open);
    if (close < 0) continue;
    // the last top-level AS inside the parentheses
    let depth = 0;
    let as = -1;
    for (let j = open + 1; j < close; j++) {
      const tok = toks[j]!;
      if (isOp(tok, '(')) depth++;
      else if (isOp(tok, ')')) depth--;
      else if (depth === 0 && isKw(tok, 'AS')) as = j;
    }
    if (as < 0) continue;
    const typeText = toks.slice(as + 1, close).map((x) => x.v).join('');
    const mapped = castType(typeText);
    if (mapped === undefined) continue;
    toks.splice(as + 1, close - as - 1, { t: 'ws', v: ' ' }, { t: 'ident', v: mapped });
    if (isKw(toks[i], 'TRY_CAST')) toks[i] = { t: 'ident', v: 'CAST' };
  }
}

function rewriteFirstValue(toks: Token[]): void {
  for (let i = 0; i < toks.length; i++) {
    if (!isKw(toks[i], 'FIRST_VALUE', 'LAST_VALUE')) continue;
    const last = isKw(toks[i], 'LAST_VALUE');
    const open = nextSig(toks, i);
    if (!isOp(toks[open], '(')) continue;
    const close = matching(toks, open);
    if (close < 0) continue;
    if (isKw(toks[nextSig(toks, close)], 'OVER')) continue; // a real window function: SQLite has it
    let depth = 0;
    let order = -1;
    for (let j = open + 1; j < close; j++) {
      const tok = toks[j]!;
      if (isOp(tok, '(')) depth++;
      else if (isOp(tok, ')')) depth--;
      else if (depth === 0 && isKw(tok, 'ORDER') && isKw(toks[nextSig(toks, j)], 'BY')) {
        order = j;
        break;
      }
    }
    if (order < 0) {
      toks[i] = { t: 'ident', v: last ? 'keel_last' : 'keel_first' };
      continue;
    }
    const by = nextSig(toks, order);
    let endKey = close;
    let desc = false;
    const lastTok = prevSig(toks, close);
    if (isKw(toks[lastTok], 'ASC', 'DESC')) {
      desc = isKw(toks[lastTok], 'DESC');
      endKey = lastTok;
    }
    // NULLS FIRST/LAST is dropped: keel_first_by puts nulls last.
    let keyToks = toks.slice(by + 1, endKey);
    const nulls = keyToks.findIndex((x) => isKw(x, 'NULLS'));
    if (nulls >= 0) keyToks = keyToks.slice(0, nulls);
    if (keyToks.some((x) => isOp(x, ','))) throw new KeelError('KEEL0010', 'This feature is not implemented: FIRST_VALUE with more than one ORDER BY key');
    const value = toks.slice(open + 1, order);
    const fn = desc !== last ? 'keel_first_by_desc' : 'keel_first_by';
    toks.splice(i, close - i + 1, { t: 'ident', v: fn }, { t: 'op', v: '(' }, ...value, { t: 'op', v: ',' }, ...keyToks, { t: 'op', v: ')' });
  }
}

/** `FROM (SELECT … FROM t inv …) WHERE inv.x`: give the derived table the inner alias. */
function rewriteDerivedAliases(toks: Token[]): void {
  for (let i = 0; i < toks.length; i++) {
    if (!isKw(toks[i], 'FROM')) continue;
    const open = nextSig(toks, i);
    if (!isOp(toks[open], '(') || !isKw(toks[nextSig(toks, open)], 'SELECT', 'WITH')) continue;
    const close = matching(toks, open);
    if (close < 0) continue;
    const after = toks[nextSig(toks, close)];
    if (after && (after.t === 'qident' || (after.t === 'ident' && !CLAUSE_KEYWORDS.has(after.v.toUpperCase())) || isKw(after, 'AS'))) continue;
    // the inner FROM at depth 1: FROM <table> [AS] <alias>
    let depth = 0;
    let alias: string | undefined;
    for (let j = open; j < close; j++) {
      const tok = toks[j]!;
      if (isOp(tok, '(')) depth++;
      else if (isOp(tok, ')')) depth--;
      else if (depth === 1 && isKw(tok, 'FROM')) {
        const table = nextSig(toks, j);
        if (toks[table]?.t !== 'ident' && toks[table]?.t !== 'qident') break;
        let a = nextSig(toks, table);
        if (isOp(toks[a], '.')) {
          a = nextSig(toks, nextSig(toks, a));
        }
        if (isKw(toks[a], 'AS')) a = nextSig(toks, a);
        const cand = toks[a];
        if (cand && cand.t === 'ident' && !CLAUSE_KEYWORDS.has(cand.v.toUpperCase())) alias = cand.v;
        break;
      }
    }
    if (alias) toks.splice(close + 1, 0, { t: 'ws', v: ' ' }, { t: 'ident', v: 'AS' }, { t: 'ws', v: ' ' }, { t: 'ident', v: alias });
  }
}

function rewriteIdentifiers(toks: Token[]): void {
  for (let i = 0; i < toks.length; i++) {
    const tok = toks[i]!;
    if (tok.t !== 'ident') continue;
    const low = tok.v.toLowerCase();
    if (low === 'information_schema') {
      const dot = nextSig(toks, i);
      const name = nextSig(toks, dot);
      if (isOp(toks[dot], '.') && toks[name]?.t === 'ident') {
        const table = toks[name]!.v.toLowerCase();
        toks.splice(i, name - i + 1, { t: 'ident', v: `information_schema_${table}` });
      }
    } else if (low === 'index') {
      toks[i] = { t: 'qident', v: '"index"' };
    }
  }
}

export interface Rewritten {
  sql: string;
  tokens: Token[];
}

/** The DataFusion → SQLite rewrites; exported for tests. */
export function rewrite(sql: string): Rewritten {
  const toks = tokenize(sql);
  // one statement only: drop trailing semicolons
  let end = toks.length;
  while (end > 0 && (!sig(toks[end - 1]) || isOp(toks[end - 1], ';'))) end--;
  toks.length = end;
  if (toks.some((x) => isOp(x, ';'))) throw new KeelError('KEEL0010', 'SQL error: ParserError("only one statement per query is supported")');
  const first = toks.find(sig);
  if (!first) throw new KeelError('KEEL0010', 'SQL error: ParserError("Expected: an SQL statement, found: EOF")');
  if (!isKw(first, 'SELECT', 'WITH', 'VALUES', 'EXPLAIN') && !isOp(first, '(')) {
    throw new KeelError('KEEL0010', `SQL error: ParserError("Expected: an SQL statement, found: ${first.v}")`);
  }
  rewriteIdentifiers(toks);
  rewriteCasts(toks);
  rewriteFirstValue(toks);
  rewriteDerivedAliases(toks);
  return { sql: toks.map((x) => x.v).join(''), tokens: toks };
}

// ---------------------------------------------------------------------------------------------
// Result column kinds from the outer select list

const KIND_BY_NAME = new Map<string, ColumnKind>();
for (const schema of [...Object.values(TABLES), INFORMATION_SCHEMA_COLUMNS, INFORMATION_SCHEMA_TABLES]) {
  for (const [name, kind] of schema) if (!KIND_BY_NAME.has(name)) KIND_BY_NAME.set(name, kind);
}

const CAST_KIND: Record<string, ColumnKind> = {
  TEXT: 'utf8', UINT64: 'uint64', INTEGER: 'int64', TIMESTAMP_TEXT: 'ts', REAL: 'float64', BOOLEAN: 'bool', BLOB: 'binary',
};

const BOOL_OPS = new Set(['=', '==', '!=', '<>', '<', '>', '<=', '>=']);
const BOOL_KWS = ['IS', 'LIKE', 'GLOB', 'IN', 'BETWEEN', 'AND', 'OR', 'NOT', 'EXISTS', 'ILIKE', 'REGEXP'];

function unquote(tok: Token): string {
  return tok.t === 'qident' ? tok.v.slice(1, -1) : tok.v;
}

type Kind = ColumnKind | 'count' | undefined;

function exprKind(e: Token[]): Kind {
  while (e.length >= 2 && isOp(e[0], '(') && matching(e, 0) === e.length - 1) e = e.slice(1, -1);
  if (e.length === 0) return undefined;
  if (isKw(e[0], 'CASE')) return undefined;
  let depth = 0;
  let arith = false;
  for (const tok of e) {
    if (isOp(tok, '(')) depth++;
    else if (isOp(tok, ')')) depth--;
    else if (depth === 0) {
      if (tok.t === 'op' && BOOL_OPS.has(tok.v)) return 'bool';
      if (isKw(tok, ...BOOL_KWS)) return 'bool';
      if (tok.t === 'op' && ['+', '-', '*', '/', '%'].includes(tok.v)) arith = true;
      if (isOp(tok, '||')) return 'utf8';
    }
  }
  if (arith) return undefined;
  if (e.length === 1) {
    const tok = e[0]!;
    if (tok.t === 'number') return /^[0-9]+$/.test(tok.v) ? 'int64' : 'float64';
    if (tok.t === 'string') return 'utf8';
    if (isKw(tok, 'TRUE', 'FALSE')) return 'bool';
    if (isKw(tok, 'NULL')) return undefined;
    if (tok.t === 'ident' || tok.t === 'qident') return KIND_BY_NAME.get(unquote(tok).toLowerCase());
    return undefined;
  }
  if (e.length === 3 && isOp(e[1], '.') && (e[2]!.t === 'ident' || e[2]!.t === 'qident')) return KIND_BY_NAME.get(unquote(e[2]!).toLowerCase());
  if (e[0]!.t === 'ident' && isOp(e[1], '(') && matching(e, 1) === e.length - 1) {
    const fn = e[0]!.v.toLowerCase();
    const args = e.slice(2, -1);
    if (fn === 'cast') {
      const mapped = args[args.length - 1];
      return mapped ? CAST_KIND[mapped.v.toUpperCase()] : undefined;
    }
    if (fn === 'count') return 'count';
    // the first argument, up to a top-level comma
    let d = 0;
    let cut = args.length;
    for (let j = 0; j < args.length; j++) {
      if (isOp(args[j], '(')) d++;
      else if (isOp(args[j], ')')) d--;
      else if (d === 0 && isOp(args[j], ',')) {
        cut = j;
        break;
      }
    }
    const first = args.slice(0, cut);
    if (first.length > 0 && isKw(first[0], 'DISTINCT')) first.shift();
    const firstKind = exprKind(first);
    switch (fn) {
      case 'sum':
      case 'total':
        return firstKind === 'float64' ? 'float64' : firstKind === 'uint64' ? 'uint64' : 'int64';
      case 'avg':
        return 'float64';
      case 'min':
      case 'max':
      case 'keel_first':
      case 'keel_last':
      case 'keel_first_by':
      case 'keel_first_by_desc':
      case 'first_value':
      case 'last_value':
      case 'coalesce':
      case 'ifnull':
      case 'nullif':
      case 'any_value':
        return firstKind === 'count' ? 'int64' : firstKind;
      case 'lower':
      case 'upper':
      case 'trim':
      case 'ltrim':
      case 'rtrim':
      case 'substr':
      case 'substring':
      case 'replace':
      case 'concat':
      case 'printf':
      case 'format':
      case 'typeof':
      case 'hex':
      case 'group_concat':
      case 'string_agg':
        return 'utf8';
      case 'length':
      case 'char_length':
        return 'int64';
      case 'now':
        return 'ts';
      default:
        return undefined;
    }
  }
  return undefined;
}

/** Kinds of the outer select list's items, or undefined when it can't be read positionally. */
function selectListKinds(tokens: Token[]): Kind[] | undefined {
  const toks = tokens.filter(sig);
  if (!isKw(toks[0], 'SELECT')) return undefined;
  let i = 1;
  if (isKw(toks[i], 'DISTINCT', 'ALL')) i++;
  const items: Token[][] = [];
  let cur: Token[] = [];
  let depth = 0;
  for (; i < toks.length; i++) {
    const tok = toks[i]!;
    if (isOp(tok, '(')) depth++;
    else if (isOp(tok, ')')) depth--;
    if (depth === 0 && (isKw(tok, 'FROM', 'WHERE', 'GROUP', 'ORDER', 'LIMIT', 'UNION', 'EXCEPT', 'INTERSECT', 'HAVING'))) break;
    if (depth === 0 && isOp(tok, ',')) {
      items.push(cur);
      cur = [];
    } else cur.push(tok);
  }
  items.push(cur);
  const kinds: Kind[] = [];
  for (let item of items) {
    if (item.some((x, k) => isOp(x, '*') && (k === 0 || isOp(item[k - 1], '.')) && item.length <= 3)) return undefined;
    const n = item.length;
    if (n >= 3 && isKw(item[n - 2], 'AS')) item = item.slice(0, n - 2);
    else if (n >= 2 && (item[n - 1]!.t === 'ident' || item[n - 1]!.t === 'qident') && !CLAUSE_KEYWORDS.has(item[n - 1]!.v.toUpperCase())) {
      const prev = item[n - 2]!;
      if (!isOp(prev, '.') && (prev.t !== 'op' || prev.v === ')')) item = item.slice(0, n - 1);
    }
    kinds.push(exprKind(item));
  }
  return kinds;
}

function valueKind(rows: SqlValue[][], col: number): ColumnKind {
  let kind: ColumnKind | undefined;
  for (const r of rows) {
    const v = r[col];
    if (v === null || v === undefined) continue;
    if (typeof v === 'string') return 'utf8';
    if (v instanceof Uint8Array) return 'binary';
    if (typeof v === 'number') kind = Number.isInteger(v) && kind !== 'float64' ? 'int64' : 'float64';
  }
  return kind ?? 'utf8';
}

// ---------------------------------------------------------------------------------------------
// Engine

export interface ResultColumn {
  name: string;
  kind: ColumnKind;
  nullable: boolean;
}

export interface QueryResult {
  columns: ResultColumn[];
  rows: SqlValue[][];
}

// sql.js (~30 ms) and Arrow (~150 ms) load on the first query that needs them, not at startup.
let sqlJs: Promise<SqlJsStatic> | undefined;
function sqlite(): Promise<SqlJsStatic> {
  sqlJs ??= import('sql.js').then((m) => m.default());
  return sqlJs;
}

type Arrow = typeof import('apache-arrow');
let arrowModule: Promise<Arrow> | undefined;
const loadArrow = () => (arrowModule ??= import('apache-arrow'));

const SQLITE_TYPE: Record<ColumnKind, string> = {
  utf8: 'TEXT', int64: 'INTEGER', uint64: 'INTEGER', float64: 'REAL', bool: 'BOOLEAN', ts: 'TEXT', binary: 'BLOB',
};

function createTable(db: Database, name: string, schema: TableSchema): void {
  db.run(`CREATE TABLE ${name} (${schema.map(([c, k]) => `"${c}" ${SQLITE_TYPE[k]}`).join(', ')})`);
}

function insertRows(db: Database, name: string, schema: TableSchema, rows: Iterable<Row>): void {
  const stmt = db.prepare(`INSERT INTO ${name} VALUES (${schema.map(() => '?').join(', ')})`);
  try {
    for (const r of rows) {
      stmt.run(schema.map(([c]) => {
        const v = r[c];
        return v === undefined ? null : v;
      }));
    }
  } finally {
    stmt.free();
  }
}

function keelFirstBy(desc: boolean) {
  return {
    init: () => ({ has: false, v: null as SqlValue, k: null as SqlValue }),
    step: (s: { has: boolean; v: SqlValue; k: SqlValue }, v: SqlValue, k: SqlValue) => {
      const better = !s.has || (k !== null && (s.k === null || (desc ? k > s.k! : k < s.k!)));
      if (better) {
        s.has = true;
        s.v = v;
        s.k = k;
      }
      return s;
    },
    finalize: (s: { v: SqlValue } | undefined) => (s ? s.v : null),
  };
}

function classify(err: unknown): KeelError {
  if (err instanceof KeelError) return err;
  const msg = (err as Error)?.message ?? String(err);
  if (/syntax error|incomplete input|unrecognized token|unterminated/i.test(msg)) return new KeelError('KEEL0010', `SQL error: ParserError("${msg}")`);
  if (/no such column|ambiguous column/i.test(msg)) return new KeelError('KEEL0010', `Schema error: ${msg}`);
  if (/no such table/i.test(msg)) return new KeelError('KEEL0010', `Error during planning: table not found: ${msg}`);
  return new KeelError('KEEL0010', `Error during planning: ${msg}`);
}

export class QueryEngine {
  constructor(private readonly registry: Registry, private readonly source: () => IntrospectionSource) {}

  async run(query: string): Promise<QueryResult> {
    const { sql, tokens } = rewrite(query);
    const referenced = new Set(tokens.filter((x) => x.t === 'ident' || x.t === 'qident').map((x) => unquote(x).toLowerCase()));
    const S = await sqlite();
    const db = new S.Database();
    try {
      await this.load(db, referenced, tokens);
      db.run('PRAGMA case_sensitive_like = ON');
      let stmt;
      try {
        stmt = db.prepare(sql);
      } catch (err) {
        throw classify(err);
      }
      try {
        const names = stmt.getColumnNames();
        const rows: SqlValue[][] = [];
        while (stmt.step()) rows.push(stmt.get());
        const listed = selectListKinds(tokens);
        const positional = listed !== undefined && listed.length === names.length;
        const columns = names.map((name, i): ResultColumn => {
          let kind: Kind = positional ? listed[i] : KIND_BY_NAME.get(name.toLowerCase());
          const count = kind === 'count';
          if (count) kind = 'int64';
          return { name, kind: (kind as ColumnKind | undefined) ?? valueKind(rows, i), nullable: !count };
        });
        return { columns, rows };
      } catch (err) {
        throw classify(err);
      } finally {
        stmt.free();
      }
    } finally {
      db.close();
    }
  }

  private async load(db: Database, referenced: Set<string>, tokens: Token[]): Promise<void> {
    db.create_aggregate('keel_first_by', keelFirstBy(false));
    db.create_aggregate('keel_first_by_desc', keelFirstBy(true));
    db.create_aggregate('keel_first', {
      init: () => ({ has: false, v: null as SqlValue }),
      step: (s: { has: boolean; v: SqlValue }, v: SqlValue) => {
        if (!s.has) {
          s.has = true;
          s.v = v;
        }
        return s;
      },
      finalize: (s: { v: SqlValue } | undefined) => (s ? s.v : null),
    });
    db.create_aggregate('keel_last', {
      init: () => ({ v: null as SqlValue }),
      step: (s: { v: SqlValue }, v: SqlValue) => {
        s.v = v;
        return s;
      },
      finalize: (s: { v: SqlValue } | undefined) => (s ? s.v : null),
    });
    db.create_function('now', () => new Date().toISOString());

    const src = this.source();
    db.run('BEGIN');
    for (const [name, schema] of Object.entries(TABLES)) createTable(db, name, schema);
    createTable(db, 'information_schema_columns', INFORMATION_SCHEMA_COLUMNS);
    createTable(db, 'information_schema_tables', INFORMATION_SCHEMA_TABLES);
    const want = (t: string) => referenced.has(t);

    if (want('information_schema_columns')) {
      const rows: Row[] = [];
      for (const [table, schema] of Object.entries(TABLES)) {
        schema.forEach(([column, kind], i) =>
          rows.push({ table_catalog: 'datafusion', table_schema: 'public', table_name: table, column_name: column, ordinal_position: i, data_type: ARROW_NAME[kind], is_nullable: 'YES' }),
        );
      }
      insertRows(db, 'information_schema_columns', INFORMATION_SCHEMA_COLUMNS, rows);
    }
    if (want('information_schema_tables')) {
      insertRows(db, 'information_schema_tables', INFORMATION_SCHEMA_TABLES,
        Object.keys(TABLES).map((t) => ({ table_catalog: 'datafusion', table_schema: 'public', table_name: t, table_type: 'BASE TABLE' })));
    }
    const journalFilter = want('sys_journal') ? journalIds(tokens) : undefined;
    const invocations: InvocationStatus[] = [];
    if (want('sys_invocation') || want('sys_invocation_status') || (want('sys_journal') && journalFilter === undefined)) {
      for await (const s of src.invocations()) invocations.push(s);
    }
    if (want('sys_invocation')) insertRows(db, 'sys_invocation', TABLES.sys_invocation!, invocations.map(invocationRow));
    if (want('sys_invocation_status')) insertRows(db, 'sys_invocation_status', TABLES.sys_invocation_status!, invocations.map(invocationStatusRow));
    if (want('sys_deployment')) insertRows(db, 'sys_deployment', TABLES.sys_deployment!, deploymentRows(this.registry));
    if (want('sys_service')) insertRows(db, 'sys_service', TABLES.sys_service!, serviceRows(this.registry));
    if (want('sys_subscription_partition')) {
      insertRows(db, 'sys_subscription_partition', TABLES.sys_subscription_partition!, subscriptionPartitionRows((await src.subscriptions?.()) ?? []));
    }
    if (want('sys_inbox')) {
      insertRows(db, 'sys_inbox', TABLES.sys_inbox!, map(src.inbox(), (r) => ({
        service_name: r.service, service_key: r.key, id: r.id, sequence_number: r.seq, created_at: ts(r.created_at_ms),
      })));
    }
    if (want('sys_keyed_service_status')) {
      insertRows(db, 'sys_keyed_service_status', TABLES.sys_keyed_service_status!, map(src.locks(), (r) => ({
        service_name: r.service, service_key: r.key, invocation_id: r.id,
      })));
    }
    if (want('state')) {
      const rows: Row[] = [];
      for await (const r of src.state()) rows.push(stateRow(r));
      insertRows(db, 'state', TABLES.state!, rows);
    }
    if (want('sys_promise')) {
      const rows: Row[] = [];
      for await (const p of src.promises()) rows.push(promiseRow(p));
      insertRows(db, 'sys_promise', TABLES.sys_promise!, rows);
    }
    if (want('sys_journal')) {
      const ids = journalFilter ?? invocations.map((s) => s.id);
      const rows: Row[] = [];
      for (let i = 0; i < ids.length; i += 64) {
        const chunk = ids.slice(i, i + 64);
        const journals = await Promise.all(chunk.map((id) => src.journal(id).catch(() => [])));
        chunk.forEach((id, k) => {
          for (const j of journals[k]!) rows.push(journalRowToSql(id, j));
        });
      }
      insertRows(db, 'sys_journal', TABLES.sys_journal!, rows);
    }
    db.run('COMMIT');
  }
}

function* map<T, U>(it: Iterable<T>, f: (t: T) => U): Iterable<U> {
  for (const x of it) yield f(x);
}

/**
 * When the query names invocation ids only positively (`id = 'inv_…'`, `IN (…)`) and has no
 * negation, only those journals can match: read just them.
 */
function journalIds(tokens: Token[]): string[] | undefined {
  if (tokens.some((x) => isKw(x, 'NOT', 'OR') || isOp(x, '!=') || isOp(x, '<>'))) return undefined;
  const ids = new Set<string>();
  for (const tok of tokens) {
    if (tok.t !== 'string') continue;
    const text = tok.v.slice(1, -1);
    if (InvocationId.parse(text)) ids.add(text);
  }
  return ids.size > 0 ? [...ids] : undefined;
}

// ---------------------------------------------------------------------------------------------
// Encoders

const ARROW_NAME: Record<ColumnKind, string> = {
  utf8: 'Utf8', int64: 'Int64', uint64: 'UInt64', float64: 'Float64', bool: 'Boolean', ts: 'Timestamp(Millisecond, Some("+00:00"))', binary: 'Binary',
};

function tsMillis(v: SqlValue): number | null {
  if (v === null) return null;
  if (typeof v === 'number') return v;
  if (typeof v === 'string') {
    const ms = Date.parse(v);
    return Number.isNaN(ms) ? null : ms;
  }
  return null;
}

function jsonValue(kind: ColumnKind, v: SqlValue): unknown {
  if (v === null || v === undefined) return undefined;
  switch (kind) {
    case 'bool':
      return typeof v === 'number' ? v !== 0 : typeof v === 'string' ? v === '1' || v.toLowerCase() === 'true' : true;
    case 'binary':
      return v instanceof Uint8Array ? Buffer.from(v).toString('hex') : Buffer.from(String(v), 'utf8').toString('hex');
    case 'ts': {
      const ms = tsMillis(v);
      return ms === null ? v : new Date(ms).toISOString();
    }
    case 'utf8':
      return v instanceof Uint8Array ? Buffer.from(v).toString('utf8') : typeof v === 'string' ? v : String(v);
    default:
      return v instanceof Uint8Array ? Buffer.from(v).toString('hex') : v;
  }
}

/** `{"rows":[…]}`: nulls omitted, timestamps RFC 3339, booleans as booleans, binary as hex. */
export function toJson(r: QueryResult): { rows: Array<Record<string, unknown>> } {
  return {
    rows: r.rows.map((row) => {
      const out: Record<string, unknown> = {};
      r.columns.forEach((c, i) => {
        const v = jsonValue(c.kind, row[i]!);
        if (v !== undefined) out[c.name] = v;
      });
      return out;
    }),
  };
}

function arrowType(a: Arrow, kind: ColumnKind): DataType {
  const { Utf8, Int64, Uint64, Float64, Bool, Timestamp, TimeUnit, Binary } = a;
  switch (kind) {
    case 'utf8':
      return new Utf8();
    case 'int64':
      return new Int64();
    case 'uint64':
      return new Uint64();
    case 'float64':
      return new Float64();
    case 'bool':
      return new Bool();
    case 'ts':
      return new Timestamp(TimeUnit.MILLISECOND, '+00:00');
    case 'binary':
      return new Binary();
  }
}

function arrowValue(kind: ColumnKind, v: SqlValue): unknown {
  if (v === null || v === undefined) return null;
  switch (kind) {
    case 'int64':
    case 'uint64': {
      if (typeof v === 'number') {
        const b = BigInt(Math.trunc(v));
        return kind === 'uint64' && b < 0n ? BigInt.asUintN(64, b) : b;
      }
      if (typeof v === 'string' && /^-?[0-9]+$/.test(v)) return BigInt(v);
      return null;
    }
    case 'float64':
      return typeof v === 'number' ? v : Number(v);
    case 'bool':
      return jsonValue('bool', v);
    case 'ts':
      return tsMillis(v);
    case 'binary':
      return v instanceof Uint8Array ? v : Buffer.from(String(v), 'utf8');
    case 'utf8':
      return jsonValue('utf8', v);
  }
}

/** An Arrow IPC stream (schema, one record batch, end-of-stream). */
export async function toArrow(r: QueryResult): Promise<Uint8Array> {
  const a = await loadArrow();
  const { Field, Schema, Struct, RecordBatch, Table, makeData, tableToIPC, vectorFromArray } = a;
  const fields = r.columns.map((c) => new Field(c.name, arrowType(a, c.kind), c.nullable));
  const children = r.columns.map((c, i) => {
    const values = r.rows.map((row) => arrowValue(c.kind, row[i]!));
    return vectorFromArray(values, arrowType(a, c.kind)).data[0]!;
  });
  const schema = new Schema(fields);
  const data = makeData({ type: new Struct(fields), length: r.rows.length, nullCount: 0, children });
  const batch = new RecordBatch(schema, data);
  return tableToIPC(new Table(schema, [batch]), 'stream');
}
