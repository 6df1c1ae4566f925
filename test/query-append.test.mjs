// The engine fills per-query tables through DuckDB's appender: every value of its column's type
// lands as it is, a value that does not fit is NULL (never an error for the whole table).
import t from 'tap';
import { DuckDBInstance } from '@duckdb/node-api';
import { appendRows } from '../dist/admin/query/append.js';

const SCHEMA = [['s', 'utf8'], ['i', 'int64'], ['u', 'uint64'], ['f', 'float64'], ['b', 'bool'], ['ts', 'ts'], ['bin', 'binary']];

t.test('values are appended by kind; what does not fit is NULL', async (t) => {
  const db = await DuckDBInstance.create(':memory:');
  const conn = await db.connect();
  t.teardown(() => conn.closeSync());
  await conn.run('CREATE TEMP TABLE probe (s VARCHAR, i BIGINT, u UBIGINT, f DOUBLE, b BOOLEAN, ts TIMESTAMP, bin BLOB)');
  await appendRows(conn, 'probe', SCHEMA, [
    { s: 'text', i: -5, u: '7', f: 1.5, b: 1, ts: '2026-11-23T00:00:00.000Z', bin: new Uint8Array([1, 2]) },
    { s: { a: 1 }, i: '12', u: true, f: '2.5', b: 'false', ts: 0, bin: 'hi' },
    // out of range or of another kind: NULL each
    { s: null, i: 1e300, u: -1, f: 'x', b: 7, ts: 1e16, bin: 3 },
    {},
  ]);
  const rows = (await conn.runAndReadAll('SELECT s, i::VARCHAR, u::VARCHAR, f, b, ts::VARCHAR, hex(bin) FROM probe')).getRows();
  t.same(rows, [
    ['text', '-5', '7', 1.5, true, '2026-11-23 00:00:00', '0102'],
    ['{"a":1}', '12', '1', 2.5, false, '1970-01-01 00:00:00', '6869'],
    [null, null, null, null, null, null, null],
    [null, null, null, null, null, null, null],
  ]);
});
