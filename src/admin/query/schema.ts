// The engine's DuckDB schema. `public` holds what queries see, under Restate's names and
// columns (TABLES): the views sys_invocation and sys_invocation_status over the copy of the
// statuses (main.keel_invocation, kept up to date from the partitions), the tables of the schema
// registry (REGISTRY_TABLES, refilled when it changes), and empty declarations of the tables
// filled per query (a query's connection shadows them with temp tables).

import { MessageType, entryTypeName } from '../../protocol/messages.js';
import { TABLES, type ColumnKind, type TableSchema } from '../introspection.js';
import { INFORMATION_SCHEMA_COPIES } from './analyze.js';

export const SERVER_RESTATE_VERSION = '1.7.12';

const DUCK_TYPE: Record<ColumnKind, string> = {
  utf8: 'VARCHAR', int64: 'BIGINT', uint64: 'UBIGINT', float64: 'DOUBLE', bool: 'BOOLEAN', ts: 'TIMESTAMP', binary: 'BLOB',
};

export const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`;
export const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;

/** The copy of every invocation status: typed columns, read from the stored JSON. */
const COPY_COLUMNS: TableSchema = [
  ['id', 'utf8'], ['target', 'utf8'], ['service', 'utf8'], ['service_key', 'utf8'], ['handler', 'utf8'], ['service_ty', 'utf8'],
  ['status', 'utf8'], ['completion_result', 'utf8'], ['completion_failure', 'utf8'], ['idempotency_key', 'utf8'],
  ['invoked_by_id', 'utf8'], ['invoked_by_subscription_id', 'utf8'], ['caller_target', 'utf8'], ['restarted_from', 'utf8'], ['deployment_id', 'utf8'],
  ['protocol_version', 'uint64'], ['journal_size', 'uint64'], ['sdk_version', 'utf8'], ['trace_id', 'utf8'],
  ['created_at', 'ts'], ['modified_at', 'ts'], ['inboxed_at', 'ts'], ['scheduled_at', 'ts'], ['execute_at', 'ts'],
  ['last_start_at', 'ts'], ['completed_at', 'ts'], ['next_retry_at', 'ts'],
  ['completion_retention', 'int64'], ['journal_retention', 'int64'], ['retry_count', 'uint64'],
  ['lf_error_code', 'utf8'], ['lf_message', 'utf8'], ['lf_index', 'uint64'], ['lf_name', 'utf8'], ['lf_type', 'utf8'],
];

export const COPY_TABLE = 'main.keel_invocation';

/** The fields of a stored status the copy reads (JSON numbers as DOUBLE: no value fails the read). */
const STATUS_JSON_COLUMNS = `{id: 'VARCHAR', service: 'VARCHAR', handler: 'VARCHAR', key: 'VARCHAR', service_type: 'VARCHAR', status: 'VARCHAR',
  idempotency_key: 'VARCHAR', invoked_by_id: 'VARCHAR', invoked_by_subscription_id: 'VARCHAR', caller_target: 'VARCHAR', restarted_from: 'VARCHAR', deployment_id: 'VARCHAR',
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

/** Rows of the copy from a file of stored statuses (one JSON document a line), in COPY_COLUMNS order. */
export function copyRowsFrom(file: string, maxObjectBytes: number): string {
  return `SELECT id,
    CASE WHEN ty = 'service' THEN service || '/' || handler ELSE service || '/' || key || '/' || handler END,
    service, CASE WHEN ty <> 'service' THEN key END, handler, ty, status,
    CASE WHEN status = 'completed' AND result IS NOT NULL THEN CASE WHEN result.failure IS NOT NULL THEN 'failure' ELSE 'success' END END,
    CASE WHEN status = 'completed' AND result.failure IS NOT NULL THEN '[' || CAST(CAST(result.failure.code AS BIGINT) AS VARCHAR) || '] ' || result.failure.message END,
    idempotency_key, invoked_by_id, invoked_by_subscription_id, caller_target, restarted_from, deployment_id,
    TRY_CAST(protocol_version AS UBIGINT), TRY_CAST(journal_length AS UBIGINT), sdk_version,
    CASE WHEN regexp_matches(traceparent, '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') AND split_part(traceparent, '-', 2) <> repeat('0', 32)
      THEN split_part(traceparent, '-', 2) END,
    ${time('created_at_ms')}, ${time('modified_at_ms')}, ${time('inboxed_at_ms')}, ${time('scheduled_at_ms')}, ${time('execute_at_ms')},
    ${time('last_start_at_ms')}, ${time('completed_at_ms')}, ${time('next_retry_at_ms')},
    TRY_CAST(completion_retention_ms AS BIGINT), TRY_CAST(journal_retention_ms AS BIGINT), TRY_CAST(retry_count AS UBIGINT),
    last_failure.error_code, last_failure.message, TRY_CAST(last_failure.related_entry_index AS UBIGINT), last_failure.related_entry_name,
    CASE WHEN last_failure.related_entry_type IS NOT NULL
      THEN coalesce(et.name, '0x' || lower(hex(TRY_CAST(last_failure.related_entry_type AS BIGINT)))) END
  FROM (SELECT *, ${SERVICE_TY} AS ty FROM read_json(${literal(file)}, format = 'newline_delimited', maximum_object_size = ${maxObjectBytes},
    columns = ${STATUS_JSON_COLUMNS})) s
  LEFT JOIN main.keel_entry_type et ON et.type = TRY_CAST(s.last_failure.related_entry_type AS INTEGER)`;
}

const derivedStatus = `CASE status WHEN 'inboxed' THEN 'pending' ELSE status END`;
const rawStatus = `CASE WHEN status IN ('running', 'backing-off', 'ready') THEN 'invoked' ELSE status END`;
const lastFailure = `CASE WHEN lf_error_code IS NOT NULL THEN '[' || lf_error_code || '] ' || coalesce(lf_message, '') END`;

/** How each column of the two invocation views reads the copy. */
const VIEW_COLUMN: Record<string, string> = {
  id: 'id', target: 'target', target_service_name: 'service', target_service_key: 'service_key', target_handler_name: 'handler',
  target_service_ty: 'service_ty', completion_result: 'completion_result', completion_failure: 'completion_failure',
  idempotency_key: 'idempotency_key', scope: 'NULL::VARCHAR', limit_key: 'NULL::VARCHAR',
  invoked_by: `CASE WHEN invoked_by_subscription_id IS NOT NULL THEN 'subscription' WHEN invoked_by_id IS NOT NULL THEN 'service' ELSE 'ingress' END`,
  invoked_by_id: 'invoked_by_id',
  invoked_by_service_name: `split_part(caller_target, '/', 1)`, invoked_by_target: 'caller_target', invoked_by_subscription_id: 'invoked_by_subscription_id',
  restarted_from: 'restarted_from', pinned_deployment_id: 'deployment_id', pinned_service_protocol_version: 'protocol_version',
  trace_id: 'trace_id', journal_size: 'journal_size', journal_commands_size: 'NULL::UBIGINT',
  created_at: 'created_at', modified_at: 'modified_at', inboxed_at: 'inboxed_at', scheduled_at: 'scheduled_at',
  scheduled_start_at: `CASE WHEN status = 'scheduled' THEN execute_at END`, running_at: 'last_start_at', completed_at: 'completed_at',
  completion_retention: 'completion_retention', journal_retention: 'journal_retention', retry_count: 'retry_count',
  last_start_at: 'last_start_at', next_retry_at: `CASE WHEN status = 'backing-off' THEN next_retry_at END`,
  last_attempt_deployment_id: 'deployment_id', last_attempt_server: 'sdk_version', last_failure: lastFailure,
  last_failure_error_code: 'lf_error_code', last_failure_related_entry_index: 'lf_index', last_failure_related_entry_name: 'lf_name',
  last_failure_related_entry_type: 'lf_type', last_failure_related_command_index: 'lf_index', last_failure_related_command_name: 'lf_name',
  last_failure_related_command_type: 'lf_type', created_using_restate_version: `'${SERVER_RESTATE_VERSION}'`,
};

function view(name: string, status: string): string {
  const copied = new Map(COPY_COLUMNS);
  const columns = TABLES[name]!.map(([column, kind]) => {
    const expr = column === 'status' ? status : VIEW_COLUMN[column];
    if (expr === undefined) throw new Error(`the view ${name} does not say how to compute ${column}`);
    // a column of the copy that has the view's type is read as it is (less for every query to plan)
    if (copied.get(expr) === kind) return expr === column ? quote(column) : `${quote(expr)} AS ${quote(column)}`;
    return `CAST(${expr} AS ${DUCK_TYPE[kind]}) AS ${quote(column)}`;
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
    createTableSql('keel_invocation', COPY_COLUMNS, 'main.'),
    'CREATE TABLE main.keel_entry_type (type INTEGER, name VARCHAR)',
    `INSERT INTO main.keel_entry_type VALUES ${types.join(', ')}`,
    view('sys_invocation', derivedStatus),
    view('sys_invocation_status', rawStatus),
    ...Object.entries(TABLES).filter(([name]) => !COPY_VIEWS.has(name)).map(([name, schema]) => createTableSql(name, schema)),
    // Copies of the catalogue's views over the tables declared above (INFORMATION_SCHEMA_COPIES).
    ...Object.entries(INFORMATION_SCHEMA_COPIES).map(([view, copy]) => `CREATE TABLE main.${copy} AS SELECT * FROM information_schema.${view} WHERE table_schema = 'public'`),
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
