// Flow control: the rule book (sys_rules), the queues waiting for a slot with pause and resume
// (sys_vqueue_meta, POST /vqueues/{id}/pause|resume) and the live counters (sys_user_limits):
// what runs, what waits, and under which rule. Refreshed every 2 s.

import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { api, sql, type Row } from '../api';
import { Badge, ErrorBox, Loading, Time, useAsync } from '../components';

const num = (v: unknown) => (v === null || v === undefined ? '–' : String(v));

function rate(r: Row): string {
  if (r.rate_starts === null || r.rate_starts === undefined) return '–';
  return `${r.rate_starts} per ${Number(r.rate_interval_ms).toLocaleString('en-US')} ms`;
}

/** One table of the page: loading, a note when empty, else the rows under their headings. */
function Listing({ rows, error, id, empty, heads, row }: { rows: Row[] | undefined; error: unknown; id: string; empty: string; heads: string[]; row: (r: Row) => ComponentChildren }) {
  if (rows === undefined) return error ? null : <Loading />;
  if (rows.length === 0) return <p class="muted" id={`no-${id}`}>{empty}</p>;
  return (
    <div class="table-wrap">
      <table class="data" id={id}>
        <thead>
          <tr>{heads.map((h) => <th>{h}</th>)}</tr>
        </thead>
        <tbody>{rows.map((r) => <tr>{row(r)}</tr>)}</tbody>
      </table>
    </div>
  );
}

export function FlowPage() {
  const rules = useAsync(() => sql('SELECT pattern, concurrency, rate_starts, rate_interval_ms, backlog, description, disabled, version, last_modified FROM sys_rules ORDER BY pattern'), [], 2000);
  const queues = useAsync(() => sql('SELECT id, scope, limit_key, queue_is_paused, num_inbox, num_running, created_at FROM sys_vqueue_meta WHERE is_active OR queue_is_paused ORDER BY num_inbox DESC, scope, limit_key LIMIT 200'), [], 2000);
  const limits = useAsync(() => sql('SELECT scope, l1, l2, level, usage, concurrency_limit, rule_pattern, available, num_waiters FROM sys_user_limits ORDER BY scope, l1, l2 LIMIT 200'), [], 2000);
  const [error, setError] = useState<unknown>(undefined);
  const toggle = async (q: Row) => {
    try {
      await api('POST', `/vqueues/${encodeURIComponent(String(q.id))}/${q.queue_is_paused ? 'resume' : 'pause'}`);
      queues.reload();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div>
      <h1>Flow control</h1>
      <p class="muted">
        Rules cap how many invocations of a scope, of each tenant (first level of the limit key) and of each second level run at once, how fast they
        start and how many may wait. Set them with <code>restate rules set</code> or <code>PUT /limits/rules</code>.
      </p>
      <ErrorBox error={rules.error ?? queues.error ?? limits.error ?? error} />
      <h2>Rules</h2>
      <Listing
        rows={rules.data}
        error={rules.error}
        id="rules"
        empty="No rules defined: nothing is limited."
        heads={['pattern', 'concurrency', 'rate', 'backlog', 'description', 'state', 'version', 'modified']}
        row={(r) => (
          <>
            <td class="mono">{String(r.pattern)}</td>
            <td>{r.concurrency === null ? 'unlimited' : num(r.concurrency)}</td>
            <td>{rate(r)}</td>
            <td>{num(r.backlog)}</td>
            <td>{r.description ? String(r.description) : ''}</td>
            <td><Badge value={r.disabled ? 'disabled' : 'enabled'} kind={r.disabled ? 'muted' : 'ok'} /></td>
            <td>v{num(r.version)}</td>
            <td><Time iso={r.last_modified} /></td>
          </>
        )}
      />
      <h2>Queues</h2>
      <Listing
        rows={queues.data}
        error={queues.error}
        id="queues"
        empty="No invocation waits for a slot, and no queue is paused."
        heads={['scope', 'limit key', 'waiting', 'running', 'oldest waiting since', 'state', '']}
        row={(q) => (
          <>
            <td class="mono">{String(q.scope)}</td>
            <td class="mono">{q.limit_key === null ? '–' : String(q.limit_key)}</td>
            <td>{num(q.num_inbox)}</td>
            <td>{num(q.num_running)}</td>
            <td><Time iso={q.created_at} /></td>
            <td><Badge value={q.queue_is_paused ? 'paused' : 'open'} kind={q.queue_is_paused ? 'warn' : 'ok'} /></td>
            <td>
              <button type="button" class="queue-toggle" onClick={() => toggle(q)}>{q.queue_is_paused ? 'Resume' : 'Pause'}</button>
            </td>
          </>
        )}
      />
      <h2>Counters</h2>
      <Listing
        rows={limits.data}
        error={limits.error}
        id="counters"
        empty="Nothing scoped runs or waits now."
        heads={['counter', 'level', 'running', 'limit', 'rule', 'free', 'waiting on it']}
        row={(c) => (
          <>
            <td class="mono">{[c.scope, c.l1, c.l2].filter((x) => x !== null && x !== undefined).join('/')}</td>
            <td>{String(c.level)}</td>
            <td>{num(c.usage)}</td>
            <td>{c.concurrency_limit === null ? 'unlimited' : num(c.concurrency_limit)}</td>
            <td class="mono">{c.rule_pattern === null ? '–' : String(c.rule_pattern)}</td>
            <td>{num(c.available)}</td>
            <td>{num(c.num_waiters)}</td>
          </>
        )}
      />
    </div>
  );
}
