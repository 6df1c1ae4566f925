// State of a virtual object or workflow key: read as `restate state get` reads it (the `state`
// table, values as hex), written as `restate state patch|clear` writes it: the whole new state
// in POST /services/{svc}/state with the `version` of the state it was edited from, so that a
// concurrent change is never overwritten.

import { useEffect, useState } from 'preact/hooks';
import { api, lit, sql, type Service } from '../api';
import { ErrorBox, Loading, Time, useAsync, useConfirm } from '../components';
import { href, Link, navigate } from '../router';
import { stateVersion } from '../sha256';

const utf8 = new TextDecoder('utf-8', { fatal: true });
const enc = new TextEncoder();

function fromHex(h: string): Uint8Array {
  const out = new Uint8Array(h.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.slice(i * 2, i * 2 + 2), 16);
  return out;
}

function toHex(b: Uint8Array): string {
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

interface Value {
  bytes: Uint8Array;
  /** The value as text, or undefined when it is not UTF-8. */
  text: string | undefined;
}

function valueOf(hex: string): Value {
  const bytes = fromHex(hex);
  let text: string | undefined;
  try {
    text = utf8.decode(bytes);
  } catch {}
  return { bytes, text };
}

async function loadState(service: string, key: string): Promise<Array<[string, Value]>> {
  const rows = await sql(`SELECT key, value FROM state WHERE service_name = ${lit(service)} AND service_key = ${lit(key)} ORDER BY key`);
  return rows.map((r) => [String(r.key), valueOf(String(r.value ?? ''))]);
}

function keyedServices(): Promise<Service[]> {
  return api<{ services: Service[] }>('GET', '/services').then((r) => r.data.services.filter((s) => s.ty === 'VirtualObject' || s.ty === 'Workflow'));
}

export function StateIndexPage({ query }: { query: URLSearchParams }) {
  const services = useAsync(keyedServices, []);
  const service = query.get('service') ?? '';
  const [key, setKey] = useState('');
  const keys = useAsync(
    () =>
      service
        ? sql(`SELECT service_key, COUNT(*) AS entries FROM state WHERE service_name = ${lit(service)} GROUP BY service_key ORDER BY service_key LIMIT 500`)
        : Promise.resolve([]),
    [service],
  );
  const open = (e: Event) => {
    e.preventDefault();
    if (service && key) navigate(`/state/${encodeURIComponent(service)}/${encodeURIComponent(key)}`);
  };
  return (
    <div class="narrow">
      <h1>State</h1>
      <p class="muted">The state of a virtual object or workflow key, as the handlers see it. You can view and edit it.</p>
      <ErrorBox error={services.error} />
      <form class="filters" onSubmit={open} id="state-open">
        <label>
          <span>service</span>
          <select name="service" value={service} onChange={(e) => navigate(href('/state', { service: e.currentTarget.value }), { replace: true })}>
            <option value="">choose…</option>
            {(services.data ?? []).map((s) => (
              <option value={s.name}>
                {s.name} ({s.ty})
              </option>
            ))}
          </select>
        </label>
        <label>
          <span>key</span>
          <input name="key" value={key} onInput={(e) => setKey(e.currentTarget.value)} placeholder="object key" />
        </label>
        <div class="filter-actions">
          <button type="submit" class="primary" disabled={!service || !key}>
            Open
          </button>
        </div>
      </form>
      {services.data && services.data.length === 0 && <p class="muted">No virtual objects or workflows are registered.</p>}
      {service && (
        <section>
          <h2>Keys of {service} with state</h2>
          <ErrorBox error={keys.error} />
          {keys.data?.length === 0 && <p class="muted">None.</p>}
          <ul class="key-list">
            {(keys.data ?? []).map((r) => (
              <li>
                <Link to={`/state/${encodeURIComponent(service)}/${encodeURIComponent(String(r.service_key))}`}>{String(r.service_key)}</Link>{' '}
                <span class="muted">
                  {String(r.entries)} entr{Number(r.entries) === 1 ? 'y' : 'ies'}
                </span>
              </li>
            ))}
          </ul>
        </section>
      )}
    </div>
  );
}

interface Draft {
  key: string;
  text: string;
  /** Edited as hex, because the value is not UTF-8. */
  hex: boolean;
}

function draftOf(state: Array<[string, Value]>): Draft[] {
  return state.map(([key, v]) => (v.text !== undefined ? { key, text: v.text, hex: false } : { key, text: toHex(v.bytes), hex: true }));
}

function bytesOfDraft(d: Draft): Uint8Array {
  return d.hex ? fromHex(d.text.replace(/\s+/g, '')) : enc.encode(d.text);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

export function StatePage({ service, objectKey }: { service: string; objectKey: string }) {
  const svc = useAsync(() => api<Service>('GET', `/services/${encodeURIComponent(service)}`).then((r) => r.data), [service]);
  const state = useAsync(() => loadState(service, objectKey), [service, objectKey]);
  // Keel's own state TTL: when this key's state goes (NULL without a TTL).
  const expiry = useAsync(
    () => sql(`SELECT MAX(expires_at) AS expires_at FROM state WHERE service_name = ${lit(service)} AND service_key = ${lit(objectKey)}`).then((r) => r[0]?.expires_at),
    [service, objectKey, state.data],
  );
  const [draft, setDraft] = useState<Draft[] | null>(null);
  const [error, setError] = useState<unknown>(undefined);
  const [note, setNote] = useState<string | null>(null);
  const [dialog, ask] = useConfirm();
  useEffect(() => {
    setDraft(null);
    setNote(null);
  }, [service, objectKey]);

  const keyed = svc.data && (svc.data.ty === 'VirtualObject' || svc.data.ty === 'Workflow');

  const write = async (entries: Array<[string, Uint8Array]>, what: string) => {
    setError(undefined);
    setNote(null);
    try {
      // The version of the state as it was read: Keel applies the write only if it still matches.
      const before = await loadState(service, objectKey);
      const shown = state.data ?? [];
      const unchangedSinceShown =
        before.length === shown.length && before.every(([k, v], i) => shown[i]![0] === k && sameBytes(shown[i]![1].bytes, v.bytes));
      if (!unchangedSinceShown) {
        state.reload();
        throw new Error('The state changed since it was shown: nothing was written. Look at the new state and edit again.');
      }
      const version = stateVersion(shown.map(([k, v]) => [k, v.bytes]));
      const new_state: Record<string, number[]> = {};
      for (const [k, v] of entries) new_state[k] = [...v];
      await api('POST', `/services/${encodeURIComponent(service)}/state`, { object_key: objectKey, new_state, version });
      const after = await loadState(service, objectKey);
      const applied = after.length === entries.length && entries.every(([k, v]) => after.some(([k2, v2]) => k2 === k && sameBytes(v2.bytes, v)));
      state.reload();
      if (!applied) throw new Error('The state changed while it was being written: Keel kept the newer state. Look at it and edit again.');
      setDraft(null);
      setNote(what);
    } catch (err) {
      setError(err);
    }
  };

  const save = async () => {
    if (!draft) return;
    const keys = draft.map((d) => d.key.trim());
    if (keys.some((k) => k === '')) return setError(new Error('Every entry needs a key.'));
    if (new Set(keys).size !== keys.length) return setError(new Error('Two entries have the same key.'));
    let entries: Array<[string, Uint8Array]>;
    try {
      entries = draft.map((d) => {
        if (d.hex && !/^([0-9a-fA-F]{2})*$/.test(d.text.replace(/\s+/g, ''))) throw new Error(`The value of '${d.key}' is not hex.`);
        return [d.key.trim(), bytesOfDraft(d)];
      });
    } catch (err) {
      return setError(err);
    }
    const old = new Map((state.data ?? []).map(([k, v]) => [k, v.bytes]));
    const added = entries.filter(([k]) => !old.has(k)).map(([k]) => k);
    const changed = entries.filter(([k, v]) => old.has(k) && !sameBytes(old.get(k)!, v)).map(([k]) => k);
    const removed = [...old.keys()].filter((k) => !entries.some(([k2]) => k2 === k));
    if (added.length + changed.length + removed.length === 0) {
      setDraft(null);
      return setNote('Nothing changed.');
    }
    const ok = await ask({
      title: `Write the state of ${service}/${objectKey}?`,
      body: (
        <ul id="state-changes">
          {added.map((k) => (
            <li>
              add <b>{k}</b>
            </li>
          ))}
          {changed.map((k) => (
            <li>
              change <b>{k}</b>
            </li>
          ))}
          {removed.map((k) => (
            <li>
              remove <b>{k}</b>
            </li>
          ))}
        </ul>
      ),
      confirm: 'Write state',
    });
    if (ok) await write(entries, `Saved: ${[...added.map((k) => `+${k}`), ...changed.map((k) => `~${k}`), ...removed.map((k) => `-${k}`)].join(' ')}`);
  };

  const clear = async () => {
    const ok = await ask({
      title: `Clear all state of ${service}/${objectKey}?`,
      body: <p>Deletes {state.data?.length ?? 0} entries. Handlers will see no state for this key.</p>,
      confirm: 'Clear state',
      danger: true,
    });
    if (ok) await write([], 'Cleared.');
  };

  return (
    <div>
      <div class="section-head">
        <h1>
          State of <span class="mono">{service}</span> / <span class="mono">{objectKey}</span>
        </h1>
        <span class="links">
          {svc.data?.ty === 'Workflow' && <Link to={href('/promises', { service, key: objectKey })}>Promises of this workflow</Link>}
          <Link to={href('/invocations', { service, key: objectKey })}>Invocations of this key</Link>
        </span>
      </div>
      <ErrorBox error={svc.error} />
      {svc.data && !keyed && <p class="warn-text">{service} is a plain service: only virtual objects and workflows have state.</p>}
      {svc.data?.state_ttl && (
        <p class="muted" id="state-ttl">
          State TTL of {service}: {svc.data.state_ttl} after the {svc.data.state_ttl_from === 'last_write' ? 'last write' : 'last access'}.
          {expiry.data ? (
            <>
              {' '}
              This key's state expires <Time iso={expiry.data} />.
            </>
          ) : null}
        </p>
      )}
      <ErrorBox error={state.error} />
      {note && (
        <p class="result ok" id="state-note">
          {note}
        </p>
      )}
      <ErrorBox error={error} title="Not saved" />
      {!state.data ? (
        !state.error && <Loading what="state" />
      ) : draft === null ? (
        <>
          <div class="table-wrap">
            <table class="data" id="state-table">
              <thead>
                <tr>
                  <th>key</th>
                  <th>value</th>
                  <th>bytes</th>
                </tr>
              </thead>
              <tbody>
                {state.data.map(([k, v]) => (
                  <tr data-key={k}>
                    <td class="mono">{k}</td>
                    <td class="mono wrap state-value">{v.text ?? <span title="not UTF-8: shown as hex">0x{toHex(v.bytes)}</span>}</td>
                    <td class="num">{v.bytes.length}</td>
                  </tr>
                ))}
                {state.data.length === 0 && (
                  <tr>
                    <td colSpan={3} class="muted">
                      No state for this key.
                    </td>
                  </tr>
                )}
              </tbody>
            </table>
          </div>
          {keyed && (
            <div class="actions">
              <button type="button" class="primary" onClick={() => setDraft(draftOf(state.data!))} id="state-edit">
                Edit
              </button>
              <button type="button" onClick={state.reload}>
                Reload
              </button>
              <button type="button" class="danger-outline" onClick={clear} disabled={state.data.length === 0}>
                Clear all
              </button>
            </div>
          )}
        </>
      ) : (
        <div class="state-editor" id="state-editor">
          <p class="muted small">
            Values are the bytes the SDK stored; with its default serde they are JSON. Non-UTF-8 values are edited as hex.
          </p>
          {draft.map((d, i) => (
            <div class="state-row">
              <input
                class="mono"
                aria-label="state key"
                value={d.key}
                onInput={(e) => setDraft(draft.map((x, j) => (j === i ? { ...x, key: e.currentTarget.value } : x)))}
              />
              <div class="state-value-edit">
                <textarea
                  class="mono"
                  aria-label={`value of ${d.key}`}
                  rows={Math.min(8, Math.max(1, d.text.split('\n').length))}
                  value={d.text}
                  onInput={(e) => setDraft(draft.map((x, j) => (j === i ? { ...x, text: e.currentTarget.value } : x)))}
                />
                {d.hex ? <span class="small muted">hex</span> : !isJson(d.text) && <span class="small warn-text">not JSON</span>}
              </div>
              <button type="button" aria-label={`remove ${d.key}`} onClick={() => setDraft(draft.filter((_, j) => j !== i))}>
                ✕
              </button>
            </div>
          ))}
          <button type="button" class="link" onClick={() => setDraft([...draft, { key: '', text: '', hex: false }])} id="state-add">
            + add entry
          </button>
          <div class="actions">
            <button type="button" onClick={() => setDraft(null)}>
              Cancel
            </button>
            <button type="button" class="primary" onClick={save} id="state-save">
              Save…
            </button>
          </div>
        </div>
      )}
      {dialog}
    </div>
  );
}
