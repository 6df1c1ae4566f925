// Schedules (Keel's own, /schedules): when each fires next, what its last firing did, and the
// actions an operator takes on one (pause, resume, fire now, delete).

import { useState } from 'preact/hooks';
import { api } from '../api';
import { Badge, ErrorBox, Linkified, Loading, Time, useAsync, useConfirm } from '../components';
import { Link } from '../router';

interface Schedule {
  name: string;
  target: string;
  cron?: string;
  timezone?: string;
  every?: string;
  overlap: string;
  catchup: string;
  paused: boolean;
  managed_by?: string;
  next_fire_at: string | null;
  last_fire_at: string | null;
  last_invocation_id: string | null;
  running: { invocation_id: string; fire_at: string } | null;
  last_outcome: { status: string; invocation_id: string | null; failure?: { code: number; message: string } } | null;
  fired: number;
  skipped: number;
}

export function SchedulesPage() {
  const list = useAsync(() => api<{ schedules: Schedule[] }>('GET', '/schedules').then((r) => r.data.schedules), [], 3000);
  const [dialog, ask] = useConfirm();
  const [error, setError] = useState<unknown>(undefined);
  const act = async (s: Schedule, action: 'pause' | 'resume' | 'trigger' | 'delete') => {
    if (action === 'delete' && !(await ask({ title: `Delete schedule ${s.name}?`, body: <p class="mono">{s.target}</p>, confirm: 'Delete', danger: true }))) return;
    try {
      const path = `/schedules/${encodeURIComponent(s.name)}`;
      await (action === 'delete' ? api('DELETE', path) : api('POST', `${path}/${action}`));
      setError(undefined);
      list.reload();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div>
      <h1>Schedules</h1>
      <p class="muted">
        Handlers invoked on a cron expression or an interval; each firing is an invocation with the idempotency key <code>schedule/&lt;name&gt;/&lt;time&gt;</code>.
      </p>
      <ErrorBox error={list.error ?? error} />
      {dialog}
      {!list.data ? (
        !list.error && <Loading />
      ) : list.data.length === 0 ? (
        <p class="muted">
          No schedules. Create one with <code>keel schedules set nightly Reports/run --cron "0 2 * * *"</code> or <code>PUT /schedules/&#123;name&#125;</code>.
        </p>
      ) : (
        <div class="table-wrap">
          <table class="data" id="schedules">
            <thead>
              <tr>
                <th>name</th>
                <th>target</th>
                <th>when</th>
                <th>next</th>
                <th>last firing</th>
                <th>outcome</th>
                <th>fired / skipped</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {list.data.map((s) => (
                <tr data-name={s.name}>
                  <td class="mono">
                    {s.name}
                    {s.managed_by === 'config' && <span class="muted small"> (config.toml)</span>}
                  </td>
                  <td class="mono">{s.target}</td>
                  <td class="mono small">
                    {s.cron !== undefined ? `${s.cron} (${s.timezone})` : `every ${s.every}`}
                    <br />
                    <span class="muted">
                      overlap {s.overlap}, catch-up {s.catchup}
                    </span>
                  </td>
                  <td>{s.paused ? <Badge value="paused" /> : s.next_fire_at ? <Time iso={s.next_fire_at} /> : '-'}</td>
                  <td>
                    {s.last_fire_at ? <Time iso={s.last_fire_at} /> : '-'}
                    {s.last_invocation_id && (
                      <div class="mono small">
                        <Link to={`/invocations/${s.last_invocation_id}`}>{s.last_invocation_id}</Link>
                      </div>
                    )}
                  </td>
                  <td>
                    {s.running ? <Badge value="running" /> : s.last_outcome ? <Badge value={s.last_outcome.status} /> : '-'}
                    {s.last_outcome?.failure && (
                      <div class="small wrap">
                        <Linkified text={`[${s.last_outcome.failure.code}] ${s.last_outcome.failure.message}`} />
                      </div>
                    )}
                  </td>
                  <td>
                    {s.fired} / {s.skipped}
                  </td>
                  <td class="actions">
                    {s.paused ? (
                      <button type="button" onClick={() => act(s, 'resume')}>
                        resume
                      </button>
                    ) : (
                      <button type="button" onClick={() => act(s, 'pause')}>
                        pause
                      </button>
                    )}
                    <button type="button" onClick={() => act(s, 'trigger')}>
                      fire now
                    </button>
                    <button type="button" class="danger-outline" onClick={() => act(s, 'delete')}>
                      delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
