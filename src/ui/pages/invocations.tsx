// Invocations: a live list over sys_invocation with filters in the URL, paging, and bulk actions
// on everything the filter matches (counted and confirmed first).

import { useEffect, useState } from 'preact/hooks';
import { ApiError, INVOCATION_ACTIONS, lit, manage, sql, type InvocationAction, type Row } from '../api';
import { Badge, CodeLink, ErrorBox, Loading, Time, useAsync, useConfirm } from '../components';
import { href, Link, navigate } from '../router';

export const STATUSES = ['pending', 'scheduled', 'running', 'backing-off', 'suspended', 'paused', 'completed'];

const AGES: Array<[value: string, label: string, ms: number, newer: boolean]> = [
  ['5m', 'created in the last 5 minutes', 5 * 60e3, true],
  ['1h', 'created in the last hour', 3600e3, true],
  ['1d', 'created in the last day', 86400e3, true],
  ['gt1h', 'older than an hour', 3600e3, false],
  ['gt1d', 'older than a day', 86400e3, false],
];

const PAGE_SIZES = [25, 10, 50, 100];

export interface Filter {
  service: string;
  handler: string;
  key: string;
  status: string;
  age: string;
  code: string;
}

const FILTER_KEYS: Array<keyof Filter> = ['service', 'handler', 'key', 'status', 'age', 'code'];

export function filterOf(q: URLSearchParams): Filter {
  const f = {} as Filter;
  for (const k of FILTER_KEYS) f[k] = q.get(k) ?? '';
  return f;
}

/** The WHERE clause of a filter; the age is counted back from `now`. */
export function whereOf(f: Filter, now: number): string {
  const c: string[] = [];
  if (f.service) c.push(`target_service_name = ${lit(f.service)}`);
  if (f.handler) c.push(`target_handler_name = ${lit(f.handler)}`);
  if (f.key) c.push(`target_service_key = ${lit(f.key)}`);
  if (f.status === 'active') c.push(`status != 'completed'`);
  else if (f.status) c.push(`status = ${lit(f.status)}`);
  const age = AGES.find((a) => a[0] === f.age);
  if (age) c.push(`created_at ${age[3] ? '>=' : '<'} ${lit(new Date(now - age[2]).toISOString())}`);
  if (f.code) c.push(`last_failure_error_code = ${lit(f.code.toUpperCase())}`);
  return c.length ? `WHERE ${c.join(' AND ')}` : '';
}

function describe(f: Filter): string {
  const parts: string[] = [];
  if (f.service) parts.push(`service ${f.service}`);
  if (f.handler) parts.push(`handler ${f.handler}`);
  if (f.key) parts.push(`key ${f.key}`);
  if (f.status) parts.push(f.status === 'active' ? 'not completed' : `status ${f.status}`);
  const age = AGES.find((a) => a[0] === f.age);
  if (age) parts.push(age[1]);
  if (f.code) parts.push(`last failure ${f.code.toUpperCase()}`);
  return parts.length ? parts.join(', ') : 'all invocations';
}

const COLUMNS =
  'id, target, target_service_name, target_service_key, target_handler_name, status, completion_result, created_at, modified_at, retry_count, last_failure_error_code, last_failure, next_retry_at';

export function InvocationsPage({ query }: { query: URLSearchParams }) {
  const f = filterOf(query);
  const page = Math.max(0, Number(query.get('page') ?? 0) || 0);
  const size = PAGE_SIZES.includes(Number(query.get('size'))) ? Number(query.get('size')) : PAGE_SIZES[0]!;
  const [live, setLive] = useState(true);
  const [draft, setDraft] = useState(f);
  const key = query.toString();
  useEffect(() => setDraft(filterOf(query)), [key]);

  const list = useAsync(
    async () => {
      const where = whereOf(f, Date.now());
      const [rows, count] = await Promise.all([
        sql(`SELECT ${COLUMNS} FROM sys_invocation ${where} ORDER BY created_at DESC, id LIMIT ${size} OFFSET ${page * size}`),
        sql(`SELECT COUNT(*) AS n FROM sys_invocation ${where}`),
      ]);
      return { rows, total: Number(count[0]?.n ?? 0) };
    },
    [key],
    live ? 2000 : undefined,
  );
  const services = useAsync(() => sql('SELECT name, ty FROM sys_service ORDER BY name'), []);

  const go = (next: Partial<Filter> & { page?: number; size?: number }) => {
    const merged = { ...f, page: 0, size: size === PAGE_SIZES[0] ? undefined : size, ...next };
    navigate(href('/invocations', merged as Record<string, string | number | undefined>), { replace: true });
  };

  const onSubmit = (e: Event) => {
    e.preventDefault();
    go(draft);
  };
  const field = (k: keyof Filter) => ({
    value: draft[k],
    onInput: (e: Event) => setDraft({ ...draft, [k]: (e.currentTarget as HTMLInputElement).value }),
  });
  const pick = (k: keyof Filter) => ({
    value: draft[k],
    onChange: (e: Event) => {
      const next = { ...draft, [k]: (e.currentTarget as HTMLSelectElement).value };
      setDraft(next);
      go(next);
    },
  });

  const total = list.data?.total ?? 0;
  const pages = Math.max(1, Math.ceil(total / size));

  return (
    <div>
      <div class="section-head">
        <h1>Invocations</h1>
        <label class="live">
          <input type="checkbox" checked={live} onChange={(e) => setLive(e.currentTarget.checked)} /> live
        </label>
      </div>
      <form class="filters" onSubmit={onSubmit} id="invocation-filters">
        <label>
          <span>service</span>
          <select name="service" {...pick('service')}>
            <option value="">any</option>
            {(services.data ?? []).map((s) => (
              <option value={String(s.name)}>{String(s.name)}</option>
            ))}
            {f.service && !(services.data ?? []).some((s) => s.name === f.service) && <option value={f.service}>{f.service}</option>}
          </select>
        </label>
        <label>
          <span>handler</span>
          <input name="handler" placeholder="any" {...field('handler')} />
        </label>
        <label>
          <span>key</span>
          <input name="key" placeholder="any" {...field('key')} />
        </label>
        <label>
          <span>status</span>
          <select name="status" {...pick('status')}>
            <option value="">any</option>
            <option value="active">not completed</option>
            {STATUSES.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          <span>age</span>
          <select name="age" {...pick('age')}>
            <option value="">any</option>
            {AGES.map(([v, label]) => (
              <option value={v}>{label}</option>
            ))}
          </select>
        </label>
        <label>
          <span>last failure code</span>
          <input name="code" placeholder="e.g. RT0007" {...field('code')} />
        </label>
        <div class="filter-actions">
          <button type="submit" class="primary">
            Filter
          </button>
          <button type="button" onClick={() => go({ service: '', handler: '', key: '', status: '', age: '', code: '' })}>
            Clear
          </button>
        </div>
      </form>

      <BulkActions filter={f} onDone={list.reload} />

      <ErrorBox error={list.error} title="Query failed" />
      {!list.data ? (
        !list.error && <Loading what="invocations" />
      ) : (
        <>
          <p class="muted count" id="invocation-count">
            {total} invocation{total === 1 ? '' : 's'} · {describe(f)}
          </p>
          <div class="table-wrap">
            <table class="data" id="invocations">
              <thead>
                <tr>
                  <th>id</th>
                  <th>target</th>
                  <th>status</th>
                  <th>created</th>
                  <th class="hide-narrow">modified</th>
                  <th class="hide-narrow">retries</th>
                  <th>last failure</th>
                </tr>
              </thead>
              <tbody>
                {list.data.rows.map((r) => (
                  <InvocationRow r={r} />
                ))}
                {list.data.rows.length === 0 && (
                  <tr>
                    <td colSpan={7} class="muted">
                      No invocations match.
                    </td>
                  </tr>
                )}
              </tbody>
            </table>
          </div>
          <div class="pager">
            <button type="button" disabled={page === 0} onClick={() => go({ page: page - 1 })}>
              ← Newer
            </button>
            <span>
              page {Math.min(page + 1, pages)} of {pages}
            </span>
            <button type="button" disabled={page + 1 >= pages} onClick={() => go({ page: page + 1 })}>
              Older →
            </button>
            <select aria-label="page size" value={String(size)} onChange={(e) => go({ size: Number(e.currentTarget.value) })}>
              {[...PAGE_SIZES].sort((a, b) => a - b).map((s) => (
                <option value={String(s)}>{s} per page</option>
              ))}
            </select>
          </div>
        </>
      )}
    </div>
  );
}

function InvocationRow({ r }: { r: Row }) {
  const id = String(r.id);
  const status = String(r.status ?? '');
  const code = typeof r.last_failure_error_code === 'string' ? r.last_failure_error_code : undefined;
  const msg = typeof r.last_failure === 'string' ? r.last_failure.replace(/^\[[A-Z0-9]+\]\s*/, '') : '';
  return (
    <tr data-id={id} data-status={status}>
      <td class="mono">
        <Link to={`/invocations/${encodeURIComponent(id)}`}>{id}</Link>
      </td>
      <td class="mono wrap">{String(r.target ?? '')}</td>
      <td>
        <Badge value={status} />
        {r.completion_result === 'failure' && <Badge value="failure" />}
        {status === 'backing-off' && r.next_retry_at !== undefined && (
          <div class="small muted">
            retry <Time iso={r.next_retry_at} />
          </div>
        )}
      </td>
      <td>
        <Time iso={r.created_at} />
      </td>
      <td class="hide-narrow">
        <Time iso={r.modified_at} />
      </td>
      <td class="num hide-narrow">{String(r.retry_count ?? 0)}</td>
      <td class="wrap small">
        {code && <CodeLink code={code} />} <span class="truncate" title={msg}>{msg}</span>
      </td>
    </tr>
  );
}

const ACTION_LABEL: Record<InvocationAction, string> = {
  cancel: 'Cancel',
  kill: 'Kill',
  pause: 'Pause',
  resume: 'Resume',
  purge: 'Purge',
  'restart-as-new': 'Restart as new',
};

/** Runs `work` over `items`, `n` at a time. */
async function pool<T>(items: T[], n: number, work: (x: T) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (i < items.length) await work(items[i++]!);
    }),
  );
}

const BULK_LIMIT = 10_000;

function BulkActions({ filter, onDone }: { filter: Filter; onDone: () => void }) {
  const [action, setAction] = useState<InvocationAction>('cancel');
  const [dialog, ask] = useConfirm();
  const [progress, setProgress] = useState<{ done: number; total: number; failed: Array<{ id: string; error: string }>; finished: boolean } | null>(null);
  const [error, setError] = useState<unknown>(undefined);

  const run = async () => {
    setError(undefined);
    try {
      const where = whereOf(filter, Date.now());
      const rows = await sql(`SELECT id FROM sys_invocation ${where} ORDER BY created_at LIMIT ${BULK_LIMIT}`);
      const ids = rows.map((r) => String(r.id));
      if (ids.length === 0) {
        setProgress({ done: 0, total: 0, failed: [], finished: true });
        return;
      }
      const ok = await ask({
        title: `${ACTION_LABEL[action]} ${ids.length} invocation${ids.length === 1 ? '' : 's'}?`,
        body: (
          <>
            <p>
              <b>{ACTION_LABEL[action]}</b> every invocation matching: {describe(filter)}.
            </p>
            <p id="bulk-count">
              <b>{ids.length}</b> invocation{ids.length === 1 ? '' : 's'} match{ids.length === 1 ? 'es' : ''} now
              {ids.length === BULK_LIMIT ? ` (at most ${BULK_LIMIT} at a time)` : ''}.
            </p>
            {(action === 'kill' || action === 'purge') && <p class="warn-text">This cannot be undone.</p>}
          </>
        ),
        confirm: `${ACTION_LABEL[action]} ${ids.length}`,
        danger: action === 'kill' || action === 'purge' || action === 'cancel',
      });
      if (!ok) return;
      const state = { done: 0, total: ids.length, failed: [] as Array<{ id: string; error: string }>, finished: false };
      setProgress({ ...state });
      await pool(ids, 4, async (id) => {
        try {
          await manage(id, action);
        } catch (err) {
          state.failed.push({ id, error: err instanceof ApiError ? `${err.status}: ${err.message}` : String(err) });
        }
        state.done++;
        setProgress({ ...state });
      });
      state.finished = true;
      setProgress({ ...state });
      onDone();
    } catch (err) {
      setError(err);
    }
  };

  return (
    <div class="bulk">
      <label>
        <span>Bulk action</span>
        <select name="bulk-action" value={action} onChange={(e) => setAction(e.currentTarget.value as InvocationAction)}>
          {INVOCATION_ACTIONS.map((a) => (
            <option value={a}>{ACTION_LABEL[a]}</option>
          ))}
        </select>
      </label>
      <button type="button" onClick={run} id="bulk-run">
        Apply to all matching…
      </button>
      {progress && (
        <span class="small" id="bulk-progress">
          {progress.total === 0 ? 'Nothing matches the filter' : `${progress.finished ? 'Done' : 'Working'}: ${progress.done}/${progress.total}`}
          {progress.failed.length > 0 && `, ${progress.failed.length} refused`}
        </span>
      )}
      {progress?.finished && progress.failed.length > 0 && (
        <details class="small">
          <summary>Refused</summary>
          <ul>
            {progress.failed.slice(0, 50).map((x) => (
              <li>
                <span class="mono">{x.id}</span>: {x.error}
              </li>
            ))}
          </ul>
        </details>
      )}
      <ErrorBox error={error} title="Bulk action failed" />
      {dialog}
    </div>
  );
}
