// One invocation: status, target, retries, last failure (code and remedy), the journal as a
// timeline, a journal mismatch (RT0016) side by side, and the manage actions, each confirmed.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, INVOCATION_ACTIONS, lit, manage, sql, type InvocationAction, type Row } from '../api';
import { Badge, bytesText, CodeLink, ErrorBox, Linkified, Loading, Remedy, Time, useAsync, useConfirm } from '../components';
import { href, Link } from '../router';

const JOURNAL_COLUMNS = 'index, entry_type, name, completed, invoked_id, invoked_target, sleep_wakeup_at, promise_name, entry_json, appended_at';

async function load(id: string): Promise<{ inv: Row | undefined; journal: Row[] }> {
  const [inv, journal] = await Promise.all([
    sql(`SELECT * FROM sys_invocation WHERE id = ${lit(id)}`),
    sql(`SELECT ${JOURNAL_COLUMNS} FROM sys_journal WHERE id = ${lit(id)} ORDER BY index`),
  ]);
  return { inv: inv[0], journal };
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

export function InvocationPage({ id }: { id: string }) {
  // Live until it completes.
  const [completed, setCompleted] = useState(false);
  const data = useAsync(() => load(id), [id], completed ? undefined : 2000);
  const inv = data.data?.inv;
  const nowCompleted = inv?.status === 'completed';
  useEffect(() => setCompleted(nowCompleted), [nowCompleted]);

  if (!data.data) return data.error ? <ErrorBox error={data.error} /> : <Loading what="the invocation" />;
  if (!inv) {
    return (
      <div>
        <h1 class="mono">{id}</h1>
        <p class="muted" id="not-found">
          No such invocation: it never existed, was purged, or its retention ran out.
        </p>
        <Link to="/invocations">All invocations</Link>
      </div>
    );
  }
  const status = String(inv.status);
  const service = String(inv.target_service_name ?? '');
  const key = str(inv.target_service_key);
  const ty = String(inv.target_service_ty ?? 'service');
  const code = str(inv.last_failure_error_code);
  const journal = data.data.journal;
  return (
    <div>
      <div class="section-head">
        <h1 class="mono id-title">{id}</h1>
        <Badge value={status} />
      </div>
      <ErrorBox error={data.error} title="Refresh failed" />
      <Actions id={id} onDone={data.reload} />
      <dl class="kv" id="invocation-summary">
        <dt>target</dt>
        <dd class="mono">
          <Link to={href('/invocations', { service })}>{service}</Link>
          {key !== undefined && (
            <>
              /
              {ty === 'service' ? (
                key
              ) : (
                <Link to={`/state/${encodeURIComponent(service)}/${encodeURIComponent(key)}`} title="State of this key">
                  {key}
                </Link>
              )}
            </>
          )}
          /{String(inv.target_handler_name ?? '')} <span class="muted">({ty.replace('_', ' ')})</span>
        </dd>
        {key !== undefined && (
          <>
            <dt>key</dt>
            <dd class="mono">{key}</dd>
          </>
        )}
        <dt>status</dt>
        <dd>
          {status}
          {inv.completion_result !== undefined && (
            <>
              {' '}
              · <Badge value={String(inv.completion_result)} />
            </>
          )}
          {str(inv.completion_failure) && (
            <div class="small">
              <Linkified text={String(inv.completion_failure)} />
            </div>
          )}
        </dd>
        <dt>retries</dt>
        <dd id="retry-count">
          {String(inv.retry_count ?? 0)}
          {str(inv.next_retry_at) && (
            <span class="muted">
              {' '}
              · next attempt <Time iso={inv.next_retry_at} />
            </span>
          )}
        </dd>
        {str(inv.invoked_by_id) && (
          <>
            <dt>invoked by</dt>
            <dd class="mono">
              <Link to={`/invocations/${encodeURIComponent(String(inv.invoked_by_id))}`}>{String(inv.invoked_by_id)}</Link> ({String(inv.invoked_by_target ?? '')})
            </dd>
          </>
        )}
        {str(inv.restarted_from) && (
          <>
            <dt>restarted from</dt>
            <dd class="mono">
              <Link to={`/invocations/${encodeURIComponent(String(inv.restarted_from))}`}>{String(inv.restarted_from)}</Link>
            </dd>
          </>
        )}
        {str(inv.idempotency_key) && (
          <>
            <dt>idempotency key</dt>
            <dd class="mono">{String(inv.idempotency_key)}</dd>
          </>
        )}
        <dt>deployment</dt>
        <dd class="mono">
          {String(inv.pinned_deployment_id ?? '–')}
          {str(inv.last_attempt_server) && <span class="muted"> · {String(inv.last_attempt_server)}</span>}
        </dd>
        <dt>created</dt>
        <dd>
          <Time iso={inv.created_at} exact />
        </dd>
        <dt>modified</dt>
        <dd>
          <Time iso={inv.modified_at} exact />
        </dd>
        {str(inv.scheduled_start_at) && (
          <>
            <dt>scheduled for</dt>
            <dd>
              <Time iso={inv.scheduled_start_at} exact />
            </dd>
          </>
        )}
        {str(inv.completed_at) && (
          <>
            <dt>completed</dt>
            <dd>
              <Time iso={inv.completed_at} exact />
            </dd>
          </>
        )}
      </dl>

      {code && (
        <section class="failure" id="last-failure">
          <h2>
            Last failure <CodeLink code={code} />
          </h2>
          <pre class="message">
            <Linkified text={String(inv.last_failure ?? '')} />
          </pre>
          {inv.last_failure_related_entry_type !== undefined && (
            <p class="small">
              The SDK points at: {String(inv.last_failure_related_entry_type)}
              {inv.last_failure_related_entry_name !== undefined && ` “${String(inv.last_failure_related_entry_name)}”`}
              {inv.last_failure_related_entry_index !== undefined && ` (command #${String(inv.last_failure_related_entry_index)})`}
            </p>
          )}
          <Remedy code={code} />
          {code === 'RT0016' && <Mismatch inv={inv} journal={journal} />}
        </section>
      )}

      <section>
        <h2>Journal</h2>
        <Timeline journal={journal} inv={inv} />
      </section>
    </div>
  );
}

// ---- actions ---------------------------------------------------------------------------------

const ACTIONS: Record<InvocationAction, { label: string; explain: string; danger?: boolean }> = {
  cancel: { label: 'Cancel', explain: 'The handler gets a cancellation and can run its compensations; the caller gets an error.', danger: true },
  kill: { label: 'Kill', explain: 'Stops the invocation at once, without running any more of its code, and kills the calls it is waiting for.', danger: true },
  pause: { label: 'Pause', explain: 'Stops retrying until you resume it.' },
  resume: { label: 'Resume', explain: 'Starts a new attempt now.' },
  purge: { label: 'Purge', explain: 'Deletes a completed invocation: its journal, result and idempotency key.', danger: true },
  'restart-as-new': { label: 'Restart as new', explain: 'Starts a new invocation with the same input (only for a completed one).' },
};

function Actions({ id, onDone }: { id: string; onDone: () => void }) {
  const [dialog, ask] = useConfirm();
  const [msg, setMsg] = useState<{ text: string; newId?: string } | null>(null);
  const [error, setError] = useState<unknown>(undefined);
  const run = async (a: InvocationAction) => {
    setMsg(null);
    setError(undefined);
    const ok = await ask({
      title: `${ACTIONS[a].label} this invocation?`,
      body: (
        <>
          <p class="mono">{id}</p>
          <p>{ACTIONS[a].explain}</p>
        </>
      ),
      confirm: ACTIONS[a].label,
      danger: ACTIONS[a].danger,
    });
    if (!ok) return;
    try {
      const r = await manage(id, a);
      const newId = r.data?.new_invocation_id;
      setMsg({ text: `${ACTIONS[a].label}: ${r.status === 202 ? 'accepted' : 'done'}`, newId });
      onDone();
    } catch (err) {
      setError(err instanceof ApiError ? err : new Error(String(err)));
    }
  };
  return (
    <div class="actions-bar" id="invocation-actions">
      {INVOCATION_ACTIONS.map((a) => (
        <button type="button" class={ACTIONS[a].danger ? 'danger-outline' : ''} onClick={() => run(a)} data-action={a}>
          {ACTIONS[a].label}
        </button>
      ))}
      {msg && (
        <span class="action-result" id="action-result">
          {msg.text}
          {msg.newId && (
            <>
              {' '}
              → <Link to={`/invocations/${encodeURIComponent(msg.newId)}`}>{msg.newId}</Link>
            </>
          )}
        </span>
      )}
      <ErrorBox error={error} title="Action refused" />
      {dialog}
    </div>
  );
}

// ---- journal -------------------------------------------------------------------------------

interface Entry {
  index: number;
  category: string;
  kind: string;
  row: Row;
  json: Record<string, unknown>;
}

function parseEntry(r: Row): Entry {
  const t = String(r.entry_type ?? '');
  const [category, kind] = t.includes(': ') ? (t.split(': ', 2) as [string, string]) : ['', t];
  let json: Record<string, unknown> = {};
  try {
    json = r.entry_json ? (JSON.parse(String(r.entry_json)) as Record<string, unknown>) : {};
  } catch {}
  return { index: Number(r.index), category, kind, row: r, json };
}

type Outcome = { value?: string; failure?: { code?: number; message?: string }; void?: boolean; invocationId?: string } | undefined;

function outcomeOf(j: Record<string, unknown>): Outcome {
  const value = j.value as { content?: string } | undefined;
  const failure = j.failure as { code?: number; message?: string } | undefined;
  if (failure) return { failure };
  if (value && typeof value === 'object') return { value: bytesText(value.content ?? '') };
  if (typeof j.invocation_id === 'string') return { invocationId: j.invocation_id };
  if ('void' in j) return { void: true };
  return undefined;
}

function OutcomeView({ o }: { o: Outcome }) {
  if (!o) return null;
  if (o.failure)
    return (
      <span class="failure-text">
        failed {o.failure.code !== undefined && `(${o.failure.code})`}: <Linkified text={o.failure.message ?? ''} />
      </span>
    );
  if (o.value !== undefined) return <code class="value">{o.value === '' ? '(empty)' : o.value}</code>;
  if (o.invocationId)
    return (
      <span>
        invocation <Link to={`/invocations/${encodeURIComponent(o.invocationId)}`}>{o.invocationId}</Link>
      </span>
    );
  return <span class="muted">done</span>;
}

function decodeKey(v: unknown): string | undefined {
  return typeof v === 'string' ? bytesText(v) : undefined;
}

/** One line saying what the entry did, from its fields. */
function detailOf(e: Entry): string {
  const j = e.json;
  const parts: string[] = [];
  const key = decodeKey(j.key);
  switch (e.kind) {
    case 'Input': {
      const headers = Array.isArray(j.headers) ? j.headers.length : 0;
      if (headers) parts.push(`${headers} header${headers === 1 ? '' : 's'}`);
      break;
    }
    case 'Sleep':
      if (e.row.sleep_wakeup_at) parts.push(`until ${String(e.row.sleep_wakeup_at).replace('T', ' ').replace('Z', ' UTC')}`);
      break;
    case 'Call':
    case 'OneWayCall':
      if (e.row.invoked_target) parts.push(`→ ${String(e.row.invoked_target)}`);
      if (typeof j.parameter === 'string') parts.push(`with ${bytesText(j.parameter)}`);
      break;
    default:
      if (key !== undefined && !e.kind.includes('Promise')) parts.push(`key ${key}`);
      else if (typeof j.key === 'string') parts.push(`promise ${String(j.key)}`);
  }
  if (e.row.promise_name && !parts.some((p) => p.startsWith('promise'))) parts.push(`promise ${String(e.row.promise_name)}`);
  return parts.join(' ');
}

function Timeline({ journal, inv }: { journal: Row[]; inv: Row }) {
  if (journal.length === 0) return <p class="muted">No journal (not started yet, or its retention ran out).</p>;
  const entries = journal.map(parseEntry);
  const byCompletion = new Map<number, Entry>();
  for (const e of entries) if (e.category === 'Notification' && typeof e.json.completion_id === 'number') byCompletion.set(e.json.completion_id, e);
  const commands = entries.filter((e) => e.category === 'Command');
  const relatedCmd = inv.last_failure_related_entry_index !== undefined ? commands[Number(inv.last_failure_related_entry_index)] : undefined;
  return (
    <ol class="timeline" id="journal">
      <li class="entry marker muted small">
        created <Time iso={inv.created_at} exact />
        {str(inv.running_at) && inv.running_at !== inv.created_at && (
          <>
            {' '}
            · last attempt started <Time iso={inv.last_start_at ?? inv.running_at} exact />
          </>
        )}
      </li>
      {entries.map((e) => {
        const completion = typeof e.json.result_completion_id === 'number' ? byCompletion.get(e.json.result_completion_id) : undefined;
        const outcome = e.category === 'Notification' ? outcomeOf(e.json) : completion ? outcomeOf(completion.json) : outcomeOf(e.json);
        const failed = relatedCmd === e;
        const pending = e.category === 'Command' && typeof e.json.result_completion_id === 'number' && !completion;
        const detail = detailOf(e);
        const name = str(e.row.name);
        const time = str(e.row.appended_at);
        return (
          <li class={`entry ${e.category.toLowerCase()} ${failed ? 'failed' : ''} ${outcome?.failure ? 'has-failure' : ''}`} data-kind={e.kind} data-index={e.index}>
            <div class="entry-head">
              <span class="idx">#{e.index}</span>
              <span class={`kind ${e.category.toLowerCase()}`}>{e.category}</span>
              <b>{e.kind}</b>
              {name && <span class="name">“{name}”</span>}
              {time && (
                <span class="when">
                  <Time iso={time} />
                </span>
              )}
            </div>
            {detail && <div class="entry-detail mono small">{detail}</div>}
            {e.category === 'Notification' ? (
              <div class="entry-result small">
                {typeof e.json.completion_id === 'number' && <span class="muted">completion {e.json.completion_id}: </span>}
                <OutcomeView o={outcome} />
              </div>
            ) : (
              (outcome || pending) && (
                <div class="entry-result small">
                  {pending ? <span class="muted">{inv.status === 'completed' ? 'never completed' : 'waiting…'}</span> : <OutcomeView o={outcome} />}
                  {completion && <span class="muted"> (#{completion.index})</span>}
                </div>
              )
            )}
            {failed && (
              <div class="entry-failure small">
                <CodeLink code={String(inv.last_failure_error_code)} /> the last attempt failed here
              </div>
            )}
            {e.row.entry_json !== undefined && (
              <details class="raw">
                <summary>raw</summary>
                <pre>{JSON.stringify(e.json, null, 2)}</pre>
              </details>
            )}
          </li>
        );
      })}
      {inv.status !== 'completed' ? (
        <li class="entry live muted">{String(inv.status)}…</li>
      ) : (
        <li class="entry marker muted small">
          completed <Time iso={inv.completed_at} exact />
        </li>
      )}
    </ol>
  );
}

// ---- journal mismatch (RT0016) -----------------------------------------------------------------

export interface MismatchParts {
  recordedType?: string;
  handlerType?: string;
  index?: number;
  fields: Array<{ field: string; recorded: string; handler: string }>;
}

/**
 * The two sides of a journal mismatch from the SDK's message, in its two forms:
 *  "… recorded the following: 'sleep' (index '1')\n - The current execution attempts to perform the following: 'run'"
 *  "… while executing 'set state' (index '1')\n- Difference:\n   key: 'alpha' != 'beta'"
 */
export function parseMismatch(message: string): MismatchParts {
  const out: MismatchParts = { fields: [] };
  const rec = /recorded the following: '([^']*)' \(index '(\d+)'\)/.exec(message);
  const cur = /attempts to perform the following: '([^']*)'/.exec(message);
  const exec = /while executing '([^']*)'(?: \(index '(\d+)'\))?/.exec(message);
  if (rec) {
    out.recordedType = rec[1];
    out.index = Number(rec[2]);
  }
  if (cur) out.handlerType = cur[1];
  if (exec) {
    out.recordedType = out.handlerType = exec[1];
    if (exec[2] !== undefined) out.index = Number(exec[2]);
  }
  const diff = message.split(/Difference:\s*\n/)[1];
  if (diff) {
    for (const line of diff.split('\n')) {
      const m = /^\s*([^:]+): '(.*)' != '(.*)'\s*$/.exec(line);
      if (m) out.fields.push({ field: m[1]!.trim(), recorded: m[2]!, handler: m[3]! });
    }
  }
  return out;
}

/** Whether the SDK's name of an operation ('set state', 'sleep') is the journal's kind ('SetState', 'Sleep'). */
function sameKind(kind: string, sdkName: string): boolean {
  const n = (x: string) => x.toLowerCase().replace(/[^a-z]/g, '');
  const k = n(kind).replace(/eager|lazy/, '');
  const s = n(sdkName);
  return k === s || k === `${s}command` || (s.length > 2 && k.startsWith(s));
}

function Mismatch({ inv, journal }: { inv: Row; journal: Row[] }) {
  const message = String(inv.last_failure ?? '');
  const p = parseMismatch(message);
  const commands = journal.map(parseEntry).filter((e) => e.category === 'Command');
  const idx = p.index ?? (inv.last_failure_related_entry_index !== undefined ? Number(inv.last_failure_related_entry_index) : undefined);
  const recorded = idx !== undefined ? commands[idx] : undefined;
  // The journal is the authority on what was recorded. When the SDK names two different
  // operations, the handler's is the one that is not the journal's (SDK versions word the two
  // lines either way round).
  let handlerType = p.handlerType;
  if (recorded && p.recordedType && p.handlerType && p.recordedType !== p.handlerType) {
    if (sameKind(recorded.kind, p.handlerType) && !sameKind(recorded.kind, p.recordedType)) handlerType = p.recordedType;
  }
  return (
    <div class="mismatch" id="mismatch">
      <h3>Journal mismatch</h3>
      <div class="side-by-side">
        <div class="side recorded">
          <h4>Recorded in the journal</h4>
          {recorded ? (
            <>
              <p class="op">
                <b>{recorded.kind}</b>
                {str(recorded.row.name) && ` “${String(recorded.row.name)}”`} <span class="muted">(entry #{recorded.index}, command #{idx})</span>
              </p>
              {detailOf(recorded) && <p class="mono small">{detailOf(recorded)}</p>}
            </>
          ) : (
            <p class="op">
              <b>{p.recordedType ?? String(inv.last_failure_related_entry_type ?? '?')}</b>
              {idx !== undefined && <span class="muted"> (command #{idx})</span>}
            </p>
          )}
          <Fields fields={p.fields.map((f) => [f.field, f.recorded])} />
        </div>
        <div class="side handler">
          <h4>Sent by the handler on replay</h4>
          <p class="op">
            <b>{handlerType ?? '?'}</b>
          </p>
          <Fields fields={p.fields.map((f) => [f.field, f.handler])} />
          {p.fields.length === 0 && handlerType === undefined && <p class="small muted">The failure message does not say; see it above.</p>}
          {p.fields.length === 0 && handlerType !== undefined && <p class="small muted">A different operation at the same point of the journal.</p>}
        </div>
      </div>
    </div>
  );
}

function Fields({ fields }: { fields: Array<[string, string]> }) {
  if (fields.length === 0) return null;
  return (
    <dl class="fields">
      {fields.map(([k, v]) => (
        <>
          <dt>{k}</dt>
          <dd class="mono" data-field={k}>
            {v}
          </dd>
        </>
      ))}
    </dl>
  );
}
