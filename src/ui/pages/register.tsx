// Register a deployment: a dry run first (POST /deployments with dry_run), shown as what would be
// added or changed against the services registered now, and, when asked, the replay check (POST
// /deployments/replay-check: suspended invocations replayed against the endpoint); then the real
// registration.

import { useState } from 'preact/hooks';
import { api, type Deployment, type EntryRef, type RegisterResponse, type ReplayReport, type Service } from '../api';
import { Badge, ErrorBox } from '../components';
import { Link } from '../router';

interface Form {
  mode: 'uri' | 'arn';
  uri: string;
  arn: string;
  role: string;
  headers: Array<{ name: string; value: string }>;
  force: boolean;
  http11: boolean;
  breaking: boolean;
  replay: boolean;
}

interface Preview {
  body: Record<string, unknown>;
  status: number;
  result: RegisterResponse;
  before: { services: Service[]; deployments: Deployment[] };
  replay?: ReplayReport;
}

function requestBody(f: Form): Record<string, unknown> {
  const headers: Record<string, string> = {};
  for (const h of f.headers) if (h.name.trim() !== '') headers[h.name.trim()] = h.value;
  const body: Record<string, unknown> = f.mode === 'uri' ? { uri: f.uri.trim() } : { arn: f.arn.trim() };
  if (f.mode === 'arn' && f.role.trim() !== '') body.assume_role_arn = f.role.trim();
  if (Object.keys(headers).length > 0) body.additional_headers = headers;
  if (f.force) body.force = true;
  if (f.mode === 'uri' && f.http11) body.use_http_11 = true;
  if (f.breaking) body.breaking = true;
  return body;
}

interface ServiceChange {
  name: string;
  kind: 'added' | 'updated' | 'unchanged';
  ty: string;
  from?: number;
  to: number;
  notes: string[];
}

/** What the registration would change, service by service. */
export function diffServices(before: Service[], after: Service[]): ServiceChange[] {
  return after.map((s) => {
    const old = before.find((b) => b.name === s.name);
    if (!old) return { name: s.name, kind: 'added', ty: s.ty, to: s.revision, notes: [`handlers ${s.handlers.map((h) => h.name).join(', ') || 'none'}`] };
    const notes: string[] = [];
    if (old.ty !== s.ty) notes.push(`type ${old.ty} → ${s.ty}`);
    const oldH = new Map(old.handlers.map((h) => [h.name, h]));
    const newH = new Map(s.handlers.map((h) => [h.name, h]));
    const added = [...newH.keys()].filter((h) => !oldH.has(h));
    const removed = [...oldH.keys()].filter((h) => !newH.has(h));
    const changed = [...newH.keys()].filter((h) => oldH.has(h) && (oldH.get(h)!.ty ?? '') !== (newH.get(h)!.ty ?? ''));
    if (added.length) notes.push(`handlers added: ${added.join(', ')}`);
    if (removed.length) notes.push(`handlers removed: ${removed.join(', ')}`);
    for (const h of changed) notes.push(`${h}: ${oldH.get(h)!.ty ?? '–'} → ${newH.get(h)!.ty ?? '–'}`);
    const kind = old.revision === s.revision && old.deployment_id === s.deployment_id ? 'unchanged' : 'updated';
    if (kind === 'updated' && notes.length === 0) notes.push('same handlers');
    return { name: s.name, kind, ty: s.ty, from: old.revision, to: s.revision, notes };
  });
}

export function RegisterPage() {
  const [f, setF] = useState<Form>({ mode: 'uri', uri: '', arn: '', role: '', headers: [], force: false, http11: false, breaking: false, replay: false });
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const [preview, setPreview] = useState<Preview | null>(null);
  const [done, setDone] = useState<{ status: number; result: RegisterResponse } | null>(null);
  const set = (p: Partial<Form>) => {
    setF({ ...f, ...p });
    setPreview(null);
    setDone(null);
    setError(undefined);
  };

  const dryRun = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    setDone(null);
    setPreview(null);
    try {
      const body = requestBody(f);
      const [services, deployments] = await Promise.all([
        api<{ services: Service[] }>('GET', '/services').then((r) => r.data.services),
        api<{ deployments: Deployment[] }>('GET', '/deployments').then((r) => r.data.deployments),
      ]);
      const r = await api<RegisterResponse>('POST', '/deployments', { ...body, dry_run: true });
      const replay = f.replay ? (await api<ReplayReport>('POST', '/deployments/replay-check', body)).data : undefined;
      setPreview({ body, status: r.status, result: r.data, before: { services, deployments }, ...(replay ? { replay } : {}) });
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  const confirm = async () => {
    if (!preview) return;
    setBusy(true);
    setError(undefined);
    try {
      const r = await api<RegisterResponse>('POST', '/deployments', preview.body);
      setDone({ status: r.status, result: r.data });
      setPreview(null);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="narrow">
      <h1>Register a deployment</h1>
      <form onSubmit={dryRun} class="form" id="register-form">
        <fieldset class="segmented">
          <legend>Endpoint</legend>
          <label>
            <input type="radio" name="mode" checked={f.mode === 'uri'} onChange={() => set({ mode: 'uri' })} /> HTTP URI
          </label>
          <label>
            <input type="radio" name="mode" checked={f.mode === 'arn'} onChange={() => set({ mode: 'arn' })} /> Lambda ARN
          </label>
        </fieldset>
        {f.mode === 'uri' ? (
          <label class="field">
            <span>URI</span>
            <input name="uri" type="url" required placeholder="http://localhost:9080" value={f.uri} onInput={(e) => set({ uri: e.currentTarget.value })} />
          </label>
        ) : (
          <>
            <label class="field">
              <span>ARN</span>
              <input name="arn" required placeholder="arn:aws:lambda:region:account:function:name:version" value={f.arn} onInput={(e) => set({ arn: e.currentTarget.value })} />
            </label>
            <label class="field">
              <span>Assume role ARN (optional)</span>
              <input name="assume_role_arn" value={f.role} onInput={(e) => set({ role: e.currentTarget.value })} />
            </label>
          </>
        )}
        <div class="field">
          <span>Additional headers (sent with discovery and every request)</span>
          {f.headers.map((h, i) => (
            <div class="header-row">
              <input
                aria-label="header name"
                placeholder="name"
                value={h.name}
                onInput={(e) => set({ headers: f.headers.map((x, j) => (j === i ? { ...x, name: e.currentTarget.value } : x)) })}
              />
              <input
                aria-label="header value"
                placeholder="value"
                value={h.value}
                onInput={(e) => set({ headers: f.headers.map((x, j) => (j === i ? { ...x, value: e.currentTarget.value } : x)) })}
              />
              <button type="button" aria-label="remove header" onClick={() => set({ headers: f.headers.filter((_, j) => j !== i) })}>
                ✕
              </button>
            </div>
          ))}
          <button type="button" class="link" onClick={() => set({ headers: [...f.headers, { name: '', value: '' }] })}>
            + add header
          </button>
        </div>
        <div class="checks">
          {f.mode === 'uri' && (
            <label>
              <input type="checkbox" name="use_http_11" checked={f.http11} onChange={(e) => set({ http11: e.currentTarget.checked })} /> HTTP/1.1
              (request-response)
            </label>
          )}
          <label>
            <input type="checkbox" name="force" checked={f.force} onChange={(e) => set({ force: e.currentTarget.checked })} /> Force (replace the
            deployment at this endpoint; in-flight invocations may break)
          </label>
          <label>
            <input type="checkbox" name="breaking" checked={f.breaking} onChange={(e) => set({ breaking: e.currentTarget.checked })} /> Allow breaking
            changes
          </label>
          <label>
            <input type="checkbox" name="replay_check" checked={f.replay} onChange={(e) => set({ replay: e.currentTarget.checked })} /> Replay check
            (replay suspended invocations of its services against it first, without side effects)
          </label>
        </div>
        <div class="actions">
          <button type="submit" class="primary" disabled={busy}>
            {busy && !preview ? 'Discovering…' : 'Preview (dry run)'}
          </button>
        </div>
      </form>

      <ErrorBox error={error} title="Registration failed" />

      {preview && <PreviewView p={preview} busy={busy} onConfirm={confirm} onCancel={() => setPreview(null)} />}

      {done && (
        <div class="result ok" id="register-result">
          <h2>{done.status === 201 ? 'Registered' : 'Already registered'}</h2>
          <p>
            Deployment <span class="mono">{done.result.id}</span> · protocol v{done.result.min_protocol_version}–v{done.result.max_protocol_version}
            {done.result.sdk_version && ` · ${done.result.sdk_version}`}
          </p>
          <ul>
            {done.result.services.map((s) => (
              <li>
                <b>{s.name}</b> <Badge value={s.ty} kind="type" /> rev {s.revision}
              </li>
            ))}
          </ul>
          <Link to="/">Back to the overview</Link>
        </div>
      )}
    </div>
  );
}

function PreviewView({ p, busy, onConfirm, onCancel }: { p: Preview; busy: boolean; onConfirm: () => void; onCancel: () => void }) {
  const existing = p.before.deployments.find((d) => d.id === p.result.id);
  const changes = diffServices(p.before.services, p.result.services);
  const nothing = existing !== undefined && changes.every((c) => c.kind === 'unchanged');
  return (
    <div class="preview" id="register-preview">
      <h2>Dry run</h2>
      <p>
        {nothing ? (
          <>
            This endpoint is already registered as <span class="mono">{existing!.id}</span> with the same services: registering changes nothing.
          </>
        ) : existing ? (
          <>
            Replaces deployment <span class="mono">{existing.id}</span> in place.
          </>
        ) : (
          <>
            Adds a new deployment <span class="mono">{p.result.id}</span>.
          </>
        )}{' '}
        Protocol v{p.result.min_protocol_version}–v{p.result.max_protocol_version}
        {p.result.sdk_version && `, ${p.result.sdk_version}`}.
      </p>
      <div class="table-wrap">
        <table class="data">
          <thead>
            <tr>
              <th>service</th>
              <th>change</th>
              <th>revision</th>
              <th>details</th>
            </tr>
          </thead>
          <tbody>
            {changes.map((c) => (
              <tr class={`change-${c.kind}`}>
                <td>
                  <b>{c.name}</b> <Badge value={c.ty} kind="type" />
                </td>
                <td>
                  <Badge value={c.kind} kind={c.kind === 'added' ? 'ok' : c.kind === 'updated' ? 'warn' : ''} />
                </td>
                <td>{c.from !== undefined && c.from !== c.to ? `${c.from} → ${c.to}` : c.to}</td>
                <td class="small">{c.notes.join('; ')}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {p.replay && <ReplayView r={p.replay} />}
      <div class="actions">
        <button type="button" onClick={onCancel}>
          Back
        </button>
        <button type="button" class="primary" disabled={busy} onClick={onConfirm} id="register-confirm">
          {busy ? 'Registering…' : nothing || (p.replay && !p.replay.passed) ? 'Register anyway' : 'Confirm registration'}
        </button>
      </div>
    </div>
  );
}

const entryText = (e: EntryRef | undefined): string =>
  e === undefined ? '' : [e.index !== undefined ? `#${e.index}` : e.command !== undefined ? `command ${e.command}` : '', e.type ?? '', e.name ? `"${e.name}"` : ''].filter(Boolean).join(' ');

/** The replay check's report: each replayed invocation, the recorded and the new entry side by side. */
function ReplayView({ r }: { r: ReplayReport }) {
  const skipped = Object.entries(r.not_replayed).map(([status, n]) => `${n} ${status}`).join(', ');
  if (r.deployment.replaces === undefined) {
    return (
      <div id="replay-report" class="result">
        <h2>Replay check</h2>
        <p>
          No deployment is registered at this endpoint: invocations in flight stay on the deployments they started on, so none would run this code.
          Nothing to replay.
        </p>
      </div>
    );
  }
  return (
    <div id="replay-report" class={r.passed ? 'result ok' : 'result bad'}>
      <h2>Replay check</h2>
      <p>
        {r.passed ? `All ${r.checked} replayed unchanged` : `${r.mismatched} mismatch(es) and ${r.failed} failed replay(s) among ${r.checked}`} · {r.checked} of{' '}
        {r.suspended} suspended invocation(s) replayed
        {skipped && ` · not replayed (a replay could run their side effects again): ${skipped}`}
      </p>
      {r.invocations.length > 0 && (
        <div class="table-wrap">
          <table class="data">
            <thead>
              <tr>
                <th>invocation</th>
                <th>verdict</th>
                <th>recorded</th>
                <th>new code</th>
                <th>details</th>
              </tr>
            </thead>
            <tbody>
              {r.invocations.map((v) => (
                <tr class={`replay-${v.verdict}`}>
                  <td>
                    <Link to={`/invocations/${v.id}`}>{v.id}</Link>
                    <div class="small">{v.target}</div>
                  </td>
                  <td>
                    <Badge value={v.verdict} kind={v.verdict === 'compatible' ? 'ok' : v.verdict === 'mismatch' ? 'bad' : 'warn'} />
                  </td>
                  <td class="mono">{entryText(v.recorded)}</td>
                  <td class="mono">{entryText(v.new)}</td>
                  <td class="small">{v.verdict === 'compatible' ? (v.ended === 'new-command' ? `then ${entryText(v.next)}` : v.ended) : `[${v.error_code}] ${v.message}`}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
