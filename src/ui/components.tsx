// Shared pieces: data loading with polling, error codes linked to the catalogue, the
// confirmation dialog, status badges, times and tables.

import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, codeIn, explain, type CodeEntry } from './api';
import { Link } from './router';

export interface Async<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/**
 * Runs `load` when `deps` change and, with `pollMs`, again while the page is visible: no more
 * often than every pollMs, and backing off to 4× the last load's duration, because /query
 * materialises the tables it reads and an open tab must not hammer a big store. Keeps the last
 * data while reloading, so a live view does not flicker; data belongs to the deps it was loaded
 * for, so another id never shows the previous one's data.
 */
export function useAsync<T>(load: () => Promise<T>, deps: unknown[], pollMs?: number): Async<T> {
  const key = JSON.stringify(deps);
  const [state, setState] = useState<{ key: string; data: T | undefined; error: unknown; loading: boolean }>({ key, data: undefined, error: undefined, loading: true });
  const [tick, setTick] = useState(0);
  const [wake, setWake] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const lastMs = useRef(0);
  useEffect(() => {
    let live = true;
    const t0 = performance.now();
    setState((s) => (s.key === key ? { ...s, loading: true } : { key, data: undefined, error: undefined, loading: true }));
    loadRef.current().then(
      (data) => {
        lastMs.current = performance.now() - t0;
        if (live) setState({ key, data, error: undefined, loading: false });
      },
      (error) => {
        lastMs.current = performance.now() - t0;
        if (live) setState((s) => ({ key, data: s.key === key ? s.data : undefined, error, loading: false }));
      },
    );
    return () => {
      live = false;
    };
  }, [key, tick]);
  useEffect(() => {
    if (!pollMs || state.loading) return;
    const t = setTimeout(
      () => (document.visibilityState === 'visible' ? setTick((n) => n + 1) : setWake((n) => n + 1)),
      Math.max(pollMs, 4 * lastMs.current),
    );
    return () => clearTimeout(t);
  }, [pollMs, key, state.loading, wake]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  const current = state.key === key;
  return { data: current ? state.data : undefined, error: current ? state.error : undefined, loading: !current || state.loading, reload };
}

export function CodeLink({ code }: { code: string }) {
  return (
    <Link to={`/errors/${encodeURIComponent(code)}`} class="code" title={`What ${code} means and what to do`}>
      {code}
    </Link>
  );
}

/** Text in which every stable code (RT0016, META0004…) links to its catalogue page. */
export function Linkified({ text }: { text: string }) {
  const parts: ComponentChildren[] = [];
  const re = /\b(?:META|RT|KEEL)\d{4}\b/g;
  let last = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    parts.push(text.slice(last, m.index));
    parts.push(<CodeLink code={m[0]} />);
    last = m.index + m[0].length;
  }
  parts.push(text.slice(last));
  return <>{parts}</>;
}

/** The remedy of a code, from GET /errors/{code}. */
export function Remedy({ code }: { code: string }) {
  const e = useAsync<CodeEntry | null>(() => explain(code), [code]);
  if (!e.data) return null;
  return (
    <div class="remedy">
      <b>{e.data.title}.</b> <span class="muted">{e.data.condition}</span>
      <div>
        <b>Remedy:</b> {e.data.remedy}
      </div>
    </div>
  );
}

/** An error as the UI shows it: message, code (linked) and the code's remedy. */
export function ErrorBox({ error, title }: { error: unknown; title?: string }) {
  if (error === undefined || error === null) return null;
  const message = error instanceof Error ? error.message : String(error);
  const code = error instanceof ApiError ? (error.code ?? codeIn(message)) : codeIn(message);
  const status = error instanceof ApiError && error.status > 0 ? error.status : undefined;
  return (
    <div class="error-box" role="alert">
      <div class="error-head">
        {title ?? 'Error'}
        {status !== undefined && <span class="muted"> (HTTP {status})</span>}
        {code && (
          <>
            {' '}
            <CodeLink code={code} />
          </>
        )}
      </div>
      <pre class="message">{message}</pre>
      {code && <Remedy code={code} />}
    </div>
  );
}

const STATUS_CLASS: Record<string, string> = {
  completed: 'ok',
  success: 'ok',
  succeeded: 'ok',
  ok: 'ok',
  running: 'run',
  pending: 'wait',
  scheduled: 'wait',
  ready: 'wait',
  inboxed: 'wait',
  suspended: 'wait',
  'backing-off': 'warn',
  overloaded: 'warn',
  paused: 'warn',
  failure: 'bad',
  failed: 'bad',
  stopped: 'bad',
};

export function Badge({ value, kind }: { value: string; kind?: string }) {
  return <span class={`badge ${kind ?? STATUS_CLASS[value] ?? ''}`}>{value}</span>;
}

function ago(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s === 0) return 'now';
  const str = s < 60 ? `${s}s` : s < 3600 ? `${Math.round(s / 60)}m` : s < 86400 ? `${Math.round(s / 3600)}h` : `${Math.round(s / 86400)}d`;
  return ms >= 0 ? `${str} ago` : `in ${str}`;
}

/** A timestamp: relative, with the exact UTC time on hover. */
export function Time({ iso, exact }: { iso?: unknown; exact?: boolean }) {
  if (typeof iso !== 'string' || iso === '') return <span class="muted">–</span>;
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return <span>{iso}</span>;
  return (
    <time dateTime={iso} title={iso}>
      {exact ? iso.replace('T', ' ').replace('Z', ' UTC') : ago(Date.now() - t)}
    </time>
  );
}

export interface ConfirmRequest {
  title: string;
  body?: ComponentChildren;
  confirm: string;
  danger?: boolean;
}

/** A modal confirmation: `const [dialog, ask] = useConfirm(); if (await ask({...})) …`. */
export function useConfirm(): [ComponentChildren, (r: ConfirmRequest) => Promise<boolean>] {
  const [req, setReq] = useState<(ConfirmRequest & { done: (ok: boolean) => void }) | null>(null);
  const ask = useCallback((r: ConfirmRequest) => new Promise<boolean>((resolve) => setReq({ ...r, done: resolve })), []);
  const close = (ok: boolean) => {
    req?.done(ok);
    setReq(null);
  };
  const dialog = req && (
    <div class="modal-backdrop" onClick={(e) => e.target === e.currentTarget && close(false)}>
      <div class="modal" role="dialog" aria-modal="true" aria-labelledby="modal-title" onKeyDown={(e) => e.key === 'Escape' && close(false)}>
        <h3 id="modal-title">{req.title}</h3>
        {req.body && <div class="modal-body">{req.body}</div>}
        <div class="modal-actions">
          <button type="button" onClick={() => close(false)}>
            Cancel
          </button>
          <button type="button" class={req.danger ? 'danger' : 'primary'} onClick={() => close(true)} ref={(b) => b?.focus()}>
            {req.confirm}
          </button>
        </div>
      </div>
    </div>
  );
  return [dialog, ask];
}

/** Columns of JSON rows, in first-seen order (`/query` leaves null columns out of a row). */
export function columnsOf(rows: Array<Record<string, unknown>>): string[] {
  const seen = new Set<string>();
  for (const r of rows) for (const k of Object.keys(r)) seen.add(k);
  return [...seen];
}

export function cell(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

export function DataTable({ rows, columns }: { rows: Array<Record<string, unknown>>; columns?: string[] }) {
  const cols = columns ?? columnsOf(rows);
  return (
    <div class="table-wrap">
      <table class="data">
        <thead>
          <tr>
            {cols.map((c) => (
              <th>{c}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr>
              {cols.map((c) => (
                <td class={r[c] === undefined || r[c] === null ? 'null' : ''}>{r[c] === undefined || r[c] === null ? 'NULL' : cell(r[c])}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function Loading({ what }: { what?: string }) {
  return <p class="muted loading">Loading{what ? ` ${what}` : ''}…</p>;
}

/** Base64 (as entry_json carries bytes) to text when it is UTF-8, else hex. */
export function bytesText(b64: string): string {
  let bin: string;
  try {
    bin = atob(b64);
  } catch {
    return b64;
  }
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return `0x${[...bytes].map((x) => x.toString(16).padStart(2, '0')).join('')}`;
  }
}
