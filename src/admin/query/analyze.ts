// What a query reads, read from DuckDB's own parse tree (json_serialize_sql): which tables it
// names and the values its WHERE pins them to (so only those rows are loaded), whether it may
// run at all (no table function or path that reads files), and the two rewrites the restate
// CLI's DataFusion-dialect queries need on DuckDB:
//
//   FIRST_VALUE(x ORDER BY y) / LAST_VALUE(…) as aggregates → first(…) / last(…)
//       (`restate services status`: DuckDB's first_value is a window function only)
//   FROM (SELECT … FROM sys_invocation inv …) WHERE inv.status …  → the subquery gets the alias inv
//       (`restate invocations ls --service …`: DataFusion lets the outer query use the inner alias)
//
// and one for speed: `x IN ('v')` → `x = 'v'` (the same, NULL included). DuckDB looks a value up in
// an index only for an equality: `restate invocations describe` asks `inv.id = 'X' AND inv.id in
// ('X')`, which scanned every id of the copy (18 ms at 1,000,000) instead of its index on id.

import type { TableFilter } from '../introspection.js';

export type Ast = null | boolean | number | string | Ast[] | { [key: string]: Ast };
type Node = { [key: string]: Ast };

/** Table functions a query may call: they compute, none of them reads a file or the catalog's settings. */
const ALLOWED_TABLE_FUNCTIONS = new Set(['range', 'generate_series', 'unnest', 'json_each', 'json_tree']);

/**
 * Functions that only wait: a query calling one would hold one of the engine's few query slots
 * (and a connection) until its time limit, for nothing an introspection query needs.
 */
const REFUSED_FUNCTIONS = new Set(['sleep_ms', 'pg_sleep']);

/** A table a query names in FROM: an identifier, never a path DuckDB would read as a file. */
const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_$]*$/;

/**
 * Functions of PostgreSQL's catalogue that psql's describe commands call qualified by pg_catalog,
 * where DuckDB does not look for them: such a call goes to the unqualified function, DuckDB's own
 * (array_to_string) or a macro Keel defines (schema.ts).
 */
export const PG_COMPAT_FUNCTIONS = new Set(['pg_get_userbyid', 'pg_encoding_to_char', 'array_to_string']);

/**
 * information_schema views read from a copy made when the engine starts (schema.ts): the schema
 * never changes at run time, and DuckDB's views walk its whole catalogue on every query (~5 ms,
 * twice in every `restate invocations describe`).
 */
export const INFORMATION_SCHEMA_COPIES: Record<string, string> = { columns: 'keel_information_schema_columns', tables: 'keel_information_schema_tables' };

/**
 * pg_catalog views read from a copy made when the engine starts, without schema `main`, where the
 * engine keeps its own tables: psql's \dt and \dn list what a query is for, not how the engine
 * keeps it (they listed keel_invocation and the copies above). pg_database is the one database a
 * client connects to, with the columns psql's \l reads (DuckDB's has four).
 */
export const PG_CATALOG_COPIES: Record<string, string> = { pg_class: 'keel_pg_class', pg_namespace: 'keel_pg_namespace', pg_database: 'keel_pg_database' };

/** The copy that a table reference to a catalogue view reads instead (`table` and `schema` lower case). */
function catalogueCopy(table: string, schema: string, ctes: ReadonlySet<string>): string | undefined {
  const copies = schema === 'information_schema' ? INFORMATION_SCHEMA_COPIES : schema === 'pg_catalog' || (schema === '' && !ctes.has(table)) ? PG_CATALOG_COPIES : undefined;
  // own properties only: `FROM constructor` names no copy
  return copies !== undefined && Object.hasOwn(copies, table) ? copies[table] : undefined;
}

/** Aggregates DataFusion spells as its window functions' names. */
const AGGREGATE_NAMES: Record<string, string> = { first_value: 'first', last_value: 'last' };

export interface Analysis {
  /** Tables of interest (`wanted`) the query names, each with the values its WHERE pins columns to. */
  tables: Map<string, TableFilter>;
  /** The tree was changed: run json_deserialize_sql's text instead of the query's. */
  rewritten: boolean;
  /** Why the query may not run (KEEL0020), when it may not. */
  refusal?: string;
  /** It reads an information_schema copy (which never changes while the engine runs). */
  catalog: boolean;
  /** It calls a table function. */
  tableFunctions: boolean;
  /** The functions it calls (lower case): whether its answer can change between runs depends on them. */
  functions: Set<string>;
}

const isNode = (a: Ast | undefined): a is Node => typeof a === 'object' && a !== null && !Array.isArray(a);
const str = (a: Ast | undefined): string => (typeof a === 'string' ? a : '');

/** Turns `x IN (constant)` into `x = constant`, in place; whether it did. */
function inOfOne(n: Node): boolean {
  if (n.class !== 'OPERATOR' || n.type !== 'COMPARE_IN' || !Array.isArray(n.children) || n.children.length !== 2) return false;
  const [left, right] = n.children;
  if (!isNode(right) || right.class !== 'CONSTANT') return false;
  n.class = 'COMPARISON';
  n.type = 'COMPARE_EQUAL';
  n.left = left!;
  n.right = right;
  delete n.children;
  return true;
}

/**
 * Names an unaliased `count(*)` of a select list `count(*)`, as Restate (DataFusion) does: DuckDB
 * names it `count_star()`, the header `restate sql "select count(*) …"` and psql would show.
 */
function nameCountStar(e: Ast): boolean {
  if (!isNode(e) || e.class !== 'FUNCTION' || str(e.function_name).toLowerCase() !== 'count_star' || str(e.alias) !== '' || e.filter != null) return false;
  e.alias = 'count(*)';
  return true;
}

/** Every object of the tree, depth first; a limit on the walk for trees no query has. */
function* nodes(root: Ast, limit = 1_000_000): Generator<Node> {
  const stack: Ast[] = [root];
  let seen = 0;
  while (stack.length > 0) {
    const a = stack.pop()!;
    if (++seen > limit) throw new Error('query tree too large');
    if (Array.isArray(a)) stack.push(...a);
    else if (isNode(a)) {
      yield a;
      for (const v of Object.values(a)) if (typeof v === 'object' && v !== null) stack.push(v);
    }
  }
}

function conjuncts(e: Ast | undefined): Node[] {
  if (!isNode(e)) return [];
  if (e.class === 'CONJUNCTION' && e.type === 'CONJUNCTION_AND' && Array.isArray(e.children)) return e.children.flatMap(conjuncts);
  return [e];
}

/** A string constant's value, or undefined for anything else. */
function stringConstant(e: Ast | undefined): string | undefined {
  if (!isNode(e) || e.class !== 'CONSTANT' || !isNode(e.value)) return undefined;
  const v = e.value;
  if (v.is_null === true || !isNode(v.type) || v.type.id !== 'VARCHAR' || typeof v.value !== 'string') return undefined;
  return v.value;
}

/** The column a reference names when it is unqualified or qualified by `names` (alias or table). */
function columnOf(e: Ast | undefined, names: readonly string[]): string | undefined {
  if (!isNode(e) || e.class !== 'COLUMN_REF' || !Array.isArray(e.column_names)) return undefined;
  const parts = e.column_names.map((p) => str(p).toLowerCase());
  if (parts.length === 1) return parts[0];
  if (parts.length === 2 && names.includes(parts[0]!)) return parts[1];
  return undefined;
}

/** `col = 'v'`, `'v' = col` or `col IN ('a', 'b')`: the column and its values. */
function pinOf(e: Node, names: readonly string[]): [string, string[]] | undefined {
  if (e.class === 'COMPARISON' && e.type === 'COMPARE_EQUAL') {
    for (const [c, v] of [[e.left, e.right], [e.right, e.left]] as const) {
      const column = columnOf(c, names);
      const value = stringConstant(v);
      if (column !== undefined && value !== undefined) return [column, [value]];
    }
    return undefined;
  }
  if (e.class === 'OPERATOR' && e.type === 'COMPARE_IN' && Array.isArray(e.children) && e.children.length >= 2) {
    const column = columnOf(e.children[0], names);
    const values = e.children.slice(1).map(stringConstant);
    if (column !== undefined && values.every((v) => v !== undefined)) return [column, values as string[]];
  }
  return undefined;
}

/** The values the WHERE of a one-table SELECT pins columns of that table to. */
function filterOf(select: Node, table: Node): Record<string, string[]> {
  const names = [str(table.alias), str(table.table_name)].map((n) => n.toLowerCase()).filter((n) => n !== '');
  const out: Record<string, string[]> = {};
  for (const c of conjuncts(select.where_clause)) {
    const pin = pinOf(c, names);
    if (pin !== undefined && out[pin[0]] === undefined) out[pin[0]] = pin[1];
  }
  return out;
}

/** Filters of several references to one table: what all of them pin, values united. */
function merge(a: TableFilter, b: TableFilter): TableFilter {
  const out: Record<string, string[]> = {};
  for (const [column, values] of Object.entries(a)) {
    const more = b[column];
    if (more !== undefined) out[column] = [...new Set([...values, ...more])];
  }
  return out;
}

function cteNames(root: Ast): Set<string> {
  const out = new Set<string>();
  for (const n of nodes(root)) {
    const map = isNode(n.cte_map) ? n.cte_map.map : undefined;
    if (!Array.isArray(map)) continue;
    for (const entry of map) if (isNode(entry)) out.add(str(entry.key).toLowerCase());
  }
  return out;
}

/** FROM (SELECT … FROM t alias …) without an alias of its own: give it the inner one. */
function aliasSubquery(select: Node): boolean {
  const from = select.from_table;
  if (!isNode(from) || from.type !== 'SUBQUERY' || str(from.alias) !== '' || !isNode(from.subquery)) return false;
  const inner = from.subquery.node;
  if (!isNode(inner) || inner.type !== 'SELECT_NODE' || !isNode(inner.from_table)) return false;
  const alias = str(inner.from_table.alias);
  if (inner.from_table.type !== 'BASE_TABLE' || alias === '') return false;
  from.alias = alias;
  return true;
}

/**
 * Reads the tree of one SELECT (`statements[0].node` of json_serialize_sql), rewriting it in
 * place. `wanted`: the tables whose filters matter (lower case); others are only checked.
 */
export function analyze(root: Ast, wanted: ReadonlySet<string>): Analysis {
  const ctes = cteNames(root);
  const tables = new Map<string, TableFilter>();
  const direct = new Map<Node, Record<string, string[]>>();
  const functions = new Set<string>();
  let rewritten = false;
  let catalog = false;
  let tableFunctions = false;
  for (const n of nodes(root)) {
    if (n.type === 'SELECT_NODE') {
      if (aliasSubquery(n)) rewritten = true;
      // Only a WHERE's conjuncts: one in the select list would rename its column of the answer.
      for (const c of conjuncts(n.where_clause)) if (inOfOne(c)) rewritten = true;
      for (const e of Array.isArray(n.select_list) ? n.select_list : []) if (nameCountStar(e)) rewritten = true;
      if (isNode(n.from_table) && n.from_table.type === 'BASE_TABLE') direct.set(n.from_table, filterOf(n, n.from_table));
    }
  }
  for (const n of nodes(root)) {
    if (n.type === 'TABLE_FUNCTION') {
      const fn = isNode(n.function) ? str(n.function.function_name).toLowerCase() : '';
      if (!ALLOWED_TABLE_FUNCTIONS.has(fn)) return { tables, rewritten, catalog, tableFunctions, functions, refusal: `the table function '${fn}' is not allowed: queries read the introspection tables only (table functions allowed: ${[...ALLOWED_TABLE_FUNCTIONS].join(', ')})` };
      tableFunctions = true;
    } else if (n.type === 'BASE_TABLE') {
      const name = str(n.table_name);
      if (!TABLE_NAME.test(name)) return { tables, rewritten, catalog, tableFunctions, functions, refusal: `'${name}' is not a table name: reading files is not allowed, queries read the introspection tables only` };
      const lower = name.toLowerCase();
      const copied = catalogueCopy(lower, str(n.schema_name).toLowerCase(), ctes);
      if (copied !== undefined) {
        if (str(n.alias) === '') n.alias = name; // `columns.table_name` still names it
        n.schema_name = 'main';
        n.table_name = copied;
        rewritten = true;
        catalog = true;
        continue;
      }
      if (!wanted.has(lower) || ctes.has(lower)) continue;
      if (str(n.schema_name).toLowerCase() === 'public') {
        n.schema_name = ''; // the table filled for this query, not its empty declaration
        rewritten = true;
      }
      const filter = direct.get(n) ?? {};
      const before = tables.get(lower);
      tables.set(lower, before === undefined ? filter : merge(before, filter));
    } else if (n.class === 'FUNCTION') {
      const name = str(n.function_name).toLowerCase();
      if (REFUSED_FUNCTIONS.has(name)) return { tables, rewritten, catalog, tableFunctions, functions, refusal: `the function '${name}' is not allowed: a query that waits holds a query slot of the engine for nothing` };
      functions.add(name);
      const rename = AGGREGATE_NAMES[name];
      if (rename !== undefined) {
        n.function_name = rename;
        rewritten = true;
      }
      if (PG_COMPAT_FUNCTIONS.has(name) && str(n.schema).toLowerCase() === 'pg_catalog') {
        n.schema = '';
        rewritten = true;
      }
    }
  }
  return { tables, rewritten, catalog, tableFunctions, functions };
}

/**
 * json_serialize_sql writes "no location" as u64 max, which JSON.parse rounds; put it back so
 * that json_deserialize_sql reads the tree.
 */
export function treeText(root: Ast): string {
  return JSON.stringify(root).replaceAll('"query_location":18446744073709552000', '"query_location":18446744073709551615');
}
