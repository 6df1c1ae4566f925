// SQL console over the introspection tables (POST /query), results as a table, CSV export.

import { useEffect, useState } from 'preact/hooks';
import { sql, type Row } from '../api';
import { cell, columnsOf, DataTable, ErrorBox, useAsync } from '../components';
import { href, navigate } from '../router';

const DEFAULT_QUERY = 'SELECT id, target, status, created_at, last_failure_error_code\nFROM sys_invocation\nORDER BY created_at DESC\nLIMIT 20';

/** Rows drawn in the page; a browser table of 100k rows is not readable anyway. */
const SHOWN = 1000;

const KNOWN_TABLES = ['sys_invocation', 'sys_invocation_status', 'sys_journal', 'state', 'sys_service', 'sys_deployment', 'sys_inbox', 'sys_keyed_service_status', 'sys_promise'];

/** RFC 4180: every field quoted when it needs it, CRLF between records. */
export function toCsv(rows: Row[], columns: string[]): string {
  const q = (s: string) => (/[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
  return [columns.map(q).join(','), ...rows.map((r) => columns.map((c) => q(cell(r[c]))).join(','))].join('\r\n') + '\r\n';
}

export function SqlPage({ query }: { query: URLSearchParams }) {
  const initial = query.get('q') ?? DEFAULT_QUERY;
  const [text, setText] = useState(initial);
  const [result, setResult] = useState<{ rows: Row[]; columns: string[]; ms: number; query: string } | null>(null);
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  const tables = useAsync(
    () => sql("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name").then((r) => r.map((x) => String(x.table_name))),
    [],
  );

  const run = async (q = text) => {
    setBusy(true);
    setError(undefined);
    const t0 = performance.now();
    try {
      const rows = await sql(q);
      setResult({ rows, columns: columnsOf(rows), ms: Math.round(performance.now() - t0), query: q });
      navigate(href('/sql', { q }), { replace: true });
    } catch (err) {
      setError(err);
      setResult(null);
    } finally {
      setBusy(false);
    }
  };
  useEffect(() => {
    if (query.get('q')) void run(initial);
  }, []);

  const download = () => {
    if (!result) return;
    const blob = new Blob([toCsv(result.rows, result.columns)], { type: 'text/csv;charset=utf-8' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = 'keel-query.csv';
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  };

  return (
    <div>
      <h1>SQL</h1>
      <div class="sql-layout">
        <aside class="tables">
          <h3>Tables</h3>
          <ul>
            {(tables.data ?? KNOWN_TABLES).map((t) => (
              <li>
                <button
                  type="button"
                  class="link mono"
                  onClick={() => {
                    const q = `SELECT * FROM ${t} LIMIT 100`;
                    setText(q);
                    void run(q);
                  }}
                >
                  {t}
                </button>
              </li>
            ))}
          </ul>
        </aside>
        <div class="sql-main">
          <form
            onSubmit={(e) => {
              e.preventDefault();
              void run();
            }}
            id="sql-form"
          >
            <textarea
              class="mono sql-input"
              name="query"
              rows={6}
              spellcheck={false}
              value={text}
              onInput={(e) => setText(e.currentTarget.value)}
              onKeyDown={(e) => {
                if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
                  e.preventDefault();
                  void run();
                }
              }}
            />
            <div class="actions">
              <button type="submit" class="primary" disabled={busy} id="sql-run">
                {busy ? 'Running…' : 'Run'} <span class="muted small">Ctrl+Enter</span>
              </button>
              <button type="button" disabled={!result || result.rows.length === 0} onClick={download} id="sql-csv">
                Export CSV
              </button>
              {result && (
                <span class="muted small" id="sql-summary">
                  {result.rows.length} row{result.rows.length === 1 ? '' : 's'} in {result.ms} ms
                </span>
              )}
            </div>
          </form>
          <ErrorBox error={error} title="Query failed" />
          {result && result.rows.length > SHOWN && (
            <p class="muted small">
              Showing the first {SHOWN} of {result.rows.length} rows; the CSV has them all.
            </p>
          )}
          {result && (result.rows.length > 0 ? <DataTable rows={result.rows.slice(0, SHOWN)} columns={result.columns} /> : <p class="muted">No rows.</p>)}
        </div>
      </div>
    </div>
  );
}
