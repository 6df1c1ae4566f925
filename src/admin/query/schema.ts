// The engine's DuckDB schema. `public` holds what queries see, under Restate's names and
// columns (TABLES): the views sys_invocation and sys_invocation_status over the copy of the
// statuses (main.keel_invocation, kept up to date from the partitions), the tables of the schema
// registry (REGISTRY_TABLES, refilled when it changes), and empty declarations of the tables
// filled per query (a query's connection shadows them with temp tables).

import { MessageType, entryTypeName } from '../../protocol/messages.js';
import { TABLES, type ColumnKind, type TableSchema } from '../introspection.js';
import { INFORMATION_SCHEMA_COPIES, PG_CATALOG_COPIES } from './analyze.js';

export const SERVER_RESTATE_VERSION = '1.7.12';

const DUCK_TYPE: Record<ColumnKind, string> = {
  utf8: 'VARCHAR', int64: 'BIGINT', uint32: 'UINTEGER', uint64: 'UBIGINT', float64: 'DOUBLE', bool: 'BOOLEAN', ts: 'TIMESTAMP', binary: 'BLOB', interval: 'INTERVAL',
};

export const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`;
export const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;

export const COPY_TABLE = 'main.keel_invocation';

/** The fields of a stored status the copy reads (JSON numbers as DOUBLE: no value fails the read). */
const STATUS_JSON_COLUMNS = `{id: 'VARCHAR', service: 'VARCHAR', handler: 'VARCHAR', key: 'VARCHAR', service_type: 'VARCHAR', status: 'VARCHAR',
  idempotency_key: 'VARCHAR', scope: 'VARCHAR', limit_key: 'VARCHAR', invoked_by_id: 'VARCHAR', invoked_by_subscription_id: 'VARCHAR', caller_target: 'VARCHAR', restarted_from: 'VARCHAR', deployment_id: 'VARCHAR',
  protocol_version: 'DOUBLE', journal_length: 'DOUBLE', sdk_version: 'VARCHAR', traceparent: 'VARCHAR', created_at_ms: 'DOUBLE', modified_at_ms: 'DOUBLE',
  inboxed_at_ms: 'DOUBLE', scheduled_at_ms: 'DOUBLE', execute_at_ms: 'DOUBLE', last_start_at_ms: 'DOUBLE', completed_at_ms: 'DOUBLE',
  next_retry_at_ms: 'DOUBLE', completion_retention_ms: 'DOUBLE', journal_retention_ms: 'DOUBLE', retry_count: 'DOUBLE',
  last_failure: 'STRUCT(error_code VARCHAR, message VARCHAR, related_entry_index DOUBLE, related_entry_name VARCHAR, related_entry_type DOUBLE)',
  result: 'STRUCT(failure STRUCT(code DOUBLE, message VARCHAR))'}`;

/** The widest instant JavaScript and the API render (±100,000,000 days around 1970), in ms. */
const MAX_MS = 8.64e15;

/** A stored time in ms as a TIMESTAMP; NULL when absent or beyond what can be rendered (never an error). */
const time = (ms: string) => `CASE WHEN ${ms} BETWEEN ${-MAX_MS} AND ${MAX_MS} THEN make_timestamp(CAST(${ms} AS BIGINT) * 1000) END`;
const SERVICE_TY = `CASE WHEN service_type IN ('VirtualObject', 'virtual_object', 'VIRTUAL_OBJECT') THEN 'virtual_object'
  WHEN service_type IN ('Workflow', 'workflow', 'WORKFLOW') THEN 'workflow' ELSE 'service' END`;

const lastFailureType = `CASE WHEN last_failure.related_entry_type IS NOT NULL
  THEN coalesce(et.name, '0x' || lower(hex(TRY_CAST(last_failure.related_entry_type AS BIGINT)))) END`;

/**
 * The copy of every invocation status, a column for each of the two views' columns that is not a
 * constant or another column under a second name (VIEW_ONLY), computed once when a status is
 * copied: the views are then plain column lists, which DuckDB binds in half the time of one with
 * expressions (~1 ms less for each query on sys_invocation). Each column: its name, kind, and its
 * value from a stored status (`s`, read from JSON with STATUS_JSON_COLUMNS, plus `ty`).
 */
const COPY_COLUMNS: Array<[name: string, kind: ColumnKind, expr: string]> = [
  ['id', 'utf8', 'id'],
  ['target', 'utf8', `CASE WHEN ty = 'service' THEN service || '/' || handler ELSE service || '/' || key || '/' || handler END`],
  ['target_service_name', 'utf8', 'service'],
  ['target_service_key', 'utf8', `CASE WHEN ty <> 'service' THEN key END`],
  ['target_handler_name', 'utf8', 'handler'],
  ['target_service_ty', 'utf8', 'ty'],
  // sys_invocation's vocabulary, then sys_invocation_status's
  ['status', 'utf8', `CASE status WHEN 'inboxed' THEN 'pending' ELSE status END`],
  ['raw_status', 'utf8', `CASE WHEN status IN ('running', 'backing-off', 'ready') THEN 'invoked' ELSE status END`],
  ['completion_result', 'utf8', `CASE WHEN status = 'completed' AND result IS NOT NULL THEN CASE WHEN result.failure IS NOT NULL THEN 'failure' ELSE 'success' END END`],
  ['completion_failure', 'utf8', `CASE WHEN status = 'completed' AND result.failure IS NOT NULL THEN '[' || CAST(CAST(result.failure.code AS BIGINT) AS VARCHAR) || '] ' || result.failure.message END`],
  ['idempotency_key', 'utf8', 'idempotency_key'],
  ['scope', 'utf8', 'scope'],
  ['limit_key', 'utf8', 'limit_key'],
  // Keel's own 'schedule': a firing of a schedule (invoked_by_target is schedule/<name>).
  ['invoked_by', 'utf8', `CASE WHEN invoked_by_subscription_id IS NOT NULL THEN 'subscription' WHEN starts_with(caller_target, 'schedule/') THEN 'schedule' WHEN invoked_by_id IS NOT NULL THEN 'service' ELSE 'ingress' END`],
  ['invoked_by_id', 'utf8', 'invoked_by_id'],
  ['invoked_by_service_name', 'utf8', `CASE WHEN NOT starts_with(caller_target, 'schedule/') THEN split_part(caller_target, '/', 1) END`],
  ['invoked_by_target', 'utf8', 'caller_target'],
  ['invoked_by_subscription_id', 'utf8', 'invoked_by_subscription_id'],
  ['restarted_from', 'utf8', 'restarted_from'],
  ['pinned_deployment_id', 'utf8', 'deployment_id'],
  ['pinned_service_protocol_version', 'uint64', 'TRY_CAST(protocol_version AS UBIGINT)'],
  ['trace_id', 'utf8', `CASE WHEN regexp_matches(traceparent, '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') AND split_part(traceparent, '-', 2) <> repeat('0', 32)
      THEN split_part(traceparent, '-', 2) END`],
  ['journal_size', 'uint64', 'TRY_CAST(journal_length AS UBIGINT)'],
  ['created_at', 'ts', time('created_at_ms')],
  ['modified_at', 'ts', time('modified_at_ms')],
  ['inboxed_at', 'ts', time('inboxed_at_ms')],
  ['scheduled_at', 'ts', time('scheduled_at_ms')],
  ['scheduled_start_at', 'ts', `CASE WHEN status = 'scheduled' THEN ${time('execute_at_ms')} END`],
  ['last_start_at', 'ts', time('last_start_at_ms')],
  ['completed_at', 'ts', time('completed_at_ms')],
  ['completion_retention', 'int64', 'TRY_CAST(completion_retention_ms AS BIGINT)'],
  ['journal_retention', 'int64', 'TRY_CAST(journal_retention_ms AS BIGINT)'],
  ['retry_count', 'uint64', 'TRY_CAST(retry_count AS UBIGINT)'],
  ['next_retry_at', 'ts', `CASE WHEN status = 'backing-off' THEN ${time('next_retry_at_ms')} END`],
  ['last_attempt_server', 'utf8', 'sdk_version'],
  ['last_failure', 'utf8', `CASE WHEN last_failure.error_code IS NOT NULL THEN '[' || last_failure.error_code || '] ' || coalesce(last_failure.message, '') END`],
  ['last_failure_error_code', 'utf8', 'last_failure.error_code'],
  ['last_failure_related_entry_index', 'uint64', 'TRY_CAST(last_failure.related_entry_index AS UBIGINT)'],
  ['last_failure_related_entry_name', 'utf8', 'last_failure.related_entry_name'],
  ['last_failure_related_entry_type', 'utf8', lastFailureType],
];

/** Rows of the copy from a file of stored statuses (one JSON document a line), in COPY_COLUMNS order. */
export function copyRowsFrom(file: string, maxObjectBytes: number): string {
  return `SELECT ${COPY_COLUMNS.map(([, , expr]) => expr).join(',\n    ')}
  FROM (SELECT *, ${SERVICE_TY} AS ty FROM read_json(${literal(file)}, format = 'newline_delimited', maximum_object_size = ${maxObjectBytes},
    columns = ${STATUS_JSON_COLUMNS})) s
  LEFT JOIN main.keel_entry_type et ON et.type = TRY_CAST(s.last_failure.related_entry_type AS INTEGER)`;
}

/** Columns of the views that the copy does not hold as they are: constants, or another column of the copy. */
const VIEW_ONLY: Record<string, string> = {
  journal_commands_size: 'NULL::UBIGINT',
  running_at: 'last_start_at', last_attempt_deployment_id: 'pinned_deployment_id',
  last_failure_related_command_index: 'last_failure_related_entry_index', last_failure_related_command_name: 'last_failure_related_entry_name',
  last_failure_related_command_type: 'last_failure_related_entry_type', created_using_restate_version: `'${SERVER_RESTATE_VERSION}'`,
};

function view(name: string, rename: Record<string, string> = {}): string {
  const copied = new Map(COPY_COLUMNS.map(([column, kind]) => [column, kind]));
  const columns = TABLES[name]!.map(([column, kind]) => {
    const expr = rename[column] ?? VIEW_ONLY[column] ?? column;
    if (copied.has(expr) && copied.get(expr) !== kind) throw new Error(`the view ${name} reads ${column} from ${expr}, of another type`);
    if (!copied.has(expr) && VIEW_ONLY[column] === undefined) throw new Error(`the view ${name} does not say how to compute ${column}`);
    return expr === column ? quote(column) : `${expr} AS ${quote(column)}`;
  });
  return `CREATE VIEW public.${name} AS SELECT ${columns.join(', ')} FROM ${COPY_TABLE}`;
}

export const COPY_VIEWS = new Set(['sys_invocation', 'sys_invocation_status']);

export function createTableSql(name: string, schema: TableSchema, prefix = 'public.', temp = false): string {
  return `CREATE ${temp ? 'TEMP ' : ''}TABLE ${prefix}${name} (${schema.map(([c, k]) => `${quote(c)} ${DUCK_TYPE[k]}`).join(', ')})`;
}

/** Everything the engine creates in a fresh database, in order. */
export function schemaSql(): string[] {
  const types = Object.values(MessageType).map((t) => `(${t}, ${literal(entryTypeName(t))})`);
  return [
    'CREATE SCHEMA public',
    createTableSql('keel_invocation', COPY_COLUMNS.map(([column, kind]) => [column, kind]), 'main.'),
    'CREATE TABLE main.keel_entry_type (type INTEGER, name VARCHAR)',
    `INSERT INTO main.keel_entry_type VALUES ${types.join(', ')}`,
    view('sys_invocation'),
    view('sys_invocation_status', { status: 'raw_status' }),
    ...Object.entries(TABLES).filter(([name]) => !COPY_VIEWS.has(name)).map(([name, schema]) => createTableSql(name, schema)),
    // Copies of the catalogue's views over the tables declared above (INFORMATION_SCHEMA_COPIES).
    ...Object.entries(INFORMATION_SCHEMA_COPIES).map(([view, copy]) => `CREATE TABLE main.${copy} AS SELECT * FROM information_schema.${view} WHERE table_schema = 'public'`),
    // The same for pg_catalog (PG_CATALOG_COPIES), leaving out schema main: every copy made here
    // is made in main, the pg_class copy last, so the engine's own tables are in none of them.
    `CREATE TABLE main.${PG_CATALOG_COPIES.pg_namespace} AS SELECT * FROM pg_catalog.pg_namespace WHERE nspname <> 'main'`,
    `CREATE TABLE main.${PG_CATALOG_COPIES.pg_class} AS SELECT * FROM pg_catalog.pg_class WHERE relnamespace NOT IN (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'main')`,
    `CREATE TABLE main.${PG_CATALOG_COPIES.pg_database} AS SELECT oid, 'keel' AS datname, 10::BIGINT AS datdba, 6 AS encoding, 'c' AS datlocprovider, false AS datistemplate, true AS datallowconn, -1 AS datconnlimit, 'C.UTF-8' AS datcollate, 'C.UTF-8' AS datctype, NULL::VARCHAR AS daticulocale, NULL::VARCHAR AS daticurules, NULL::VARCHAR AS datlocale, NULL::VARCHAR AS datcollversion, NULL::VARCHAR[] AS datacl, 0::BIGINT AS dattablespace FROM pg_catalog.pg_database WHERE datname = current_database()`,
    // psql's \dt, \dn and \l (see PG_COMPAT_FUNCTIONS)
    `CREATE MACRO public.pg_get_userbyid(oid) AS 'keel'`,
    `CREATE MACRO public.pg_encoding_to_char(encoding) AS 'UTF8'`,
  ];
}

/** A temp table of this query's connection, shadowing the empty declaration in `public` (filled by append.ts). */
export function perQueryTableSql(name: string): string {
  return createTableSql(name, TABLES[name]!, '', true);
}

/** Tables a query may name whose rows come from outside the copy. */
export const PER_QUERY = new Set(Object.keys(TABLES).filter((n) => !COPY_VIEWS.has(n)));
