// Overview: server, partitions, deployments, and services with their handlers and options.

import { api, ApiError, type Deployment, type Handler, type Partition, type Service } from '../api';
import { Badge, CodeLink, ErrorBox, Loading, Time, useAsync } from '../components';
import { href, Link } from '../router';

interface Overview {
  version: { version: string; ingress_endpoint?: string } | undefined;
  healthy: boolean;
  deployments: Deployment[];
  services: Service[];
  partitions: Partition[] | null;
}

async function load(): Promise<Overview> {
  const [version, health, deployments, services, partitions] = await Promise.all([
    api<{ version: string; ingress_endpoint?: string }>('GET', '/version').then((r) => r.data, () => undefined),
    api('GET', '/health').then(() => true, () => false),
    api<{ deployments: Deployment[] }>('GET', '/deployments').then((r) => r.data.deployments),
    api<{ services: Service[] }>('GET', '/services').then((r) => r.data.services),
    api<{ partitions: Partition[] }>('GET', '/partitions').then(
      (r) => r.data.partitions,
      (err) => {
        if (err instanceof ApiError && (err.status === 404 || err.status === 501)) return null;
        throw err;
      },
    ),
  ]);
  return { version, healthy: health, deployments, services, partitions };
}

export function OverviewPage() {
  const o = useAsync(load, [], 5000);
  if (!o.data) return o.error ? <ErrorBox error={o.error} /> : <Loading />;
  const { version, healthy, deployments, services, partitions } = o.data;
  return (
    <div>
      <h1>Overview</h1>
      <ErrorBox error={o.error} title="Refresh failed" />
      <section class="cards">
        <div class="card">
          <div class="label">Admin API</div>
          <div class="value">
            <Badge value={healthy ? 'ok' : 'stopped'} /> {version ? `Keel (Restate API ${version.version})` : ''}
          </div>
        </div>
        <div class="card">
          <div class="label">Ingress</div>
          <div class="value mono">{version?.ingress_endpoint ?? '–'}</div>
        </div>
        <div class="card">
          <div class="label">Deployments</div>
          <div class="value">{deployments.length}</div>
        </div>
        <div class="card">
          <div class="label">Services</div>
          <div class="value">{services.length}</div>
        </div>
      </section>

      <section>
        <h2>Partitions</h2>
        {partitions === null ? (
          <p class="muted">This server does not report partition health.</p>
        ) : (
          <div class="table-wrap">
            <table class="data" id="partitions">
              <thead>
                <tr>
                  <th>#</th>
                  <th>health</th>
                  <th>applied log position</th>
                  <th>queued</th>
                  <th>invocations (in memory)</th>
                  <th>inboxed</th>
                  <th>timers</th>
                  <th>outbox</th>
                </tr>
              </thead>
              <tbody>
                {partitions.map((p) => (
                  <tr>
                    <td title={`keys ${p.key_range.start}–${p.key_range.end}`}>{p.id}</td>
                    <td>
                      <Badge value={p.health} />
                    </td>
                    <td class="num">{p.applied_log_position}</td>
                    <td class="num">{p.queued_commands}</td>
                    <td>
                      {Object.entries(p.invocations)
                        .filter(([s]) => s !== 'completed')
                        .map(([s, n]) => `${n} ${s}`)
                        .join(', ') || <span class="muted">idle</span>}
                    </td>
                    <td class="num">{p.inboxed}</td>
                    <td class="num">{p.timers}</td>
                    <td class="num">{p.outbox}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>

      <section>
        <div class="section-head">
          <h2>Deployments</h2>
          <Link to="/register" class="button primary">
            Register a deployment
          </Link>
        </div>
        {deployments.length === 0 ? (
          <p class="muted">
            No deployments yet. <Link to="/register">Register one</Link>.
          </p>
        ) : (
          <div class="table-wrap">
            <table class="data" id="deployments">
              <thead>
                <tr>
                  <th>id</th>
                  <th>endpoint</th>
                  <th>protocol</th>
                  <th>services</th>
                  <th>created</th>
                </tr>
              </thead>
              <tbody>
                {deployments.map((d) => (
                  <tr>
                    <td class="mono">{d.id}</td>
                    <td class="mono wrap">
                      {d.uri ?? d.arn}
                      {d.assume_role_arn && <div class="muted">role {d.assume_role_arn}</div>}
                      {d.additional_headers && <div class="muted">headers: {Object.keys(d.additional_headers).join(', ')}</div>}
                    </td>
                    <td>
                      {d.protocol_type}
                      {d.http_version && <span class="muted"> · {d.http_version}</span>}
                      <div class="muted">
                        v{d.min_protocol_version}–v{d.max_protocol_version}
                        {d.sdk_version && ` · ${d.sdk_version}`}
                      </div>
                    </td>
                    <td>
                      {d.services.map((s) => (
                        <div>
                          <a href={`#svc-${s.name}`} onClick={() => openService(s.name)}>
                            {s.name}
                          </a>{' '}
                          <span class="muted">rev {s.revision}</span>
                        </div>
                      ))}
                    </td>
                    <td>
                      <Time iso={d.created_at} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>

      <section>
        <h2>Services</h2>
        {services.length === 0 && <p class="muted">No services.</p>}
        {services.map((s) => (
          <ServiceCard s={s} />
        ))}
      </section>
    </div>
  );
}

function openService(name: string): void {
  const d = document.getElementById(`svc-${name}`);
  if (d instanceof HTMLDetailsElement) d.open = true;
}

function retry(r: Service['retry_policy']): string {
  if (!r) return '–';
  const parts = [];
  if (r.initial_interval) parts.push(`${r.initial_interval} ×${r.exponentiation_factor ?? '?'} up to ${r.max_interval ?? '?'}`);
  parts.push(`${r.max_attempts ?? '∞'} attempts`);
  if (r.on_max_attempts) parts.push(`then ${r.on_max_attempts.toLowerCase()}`);
  return parts.join(', ');
}

function handlerOptions(h: Handler): string {
  const o: string[] = [];
  if (h.public === false) o.push('private');
  if (h.journal_retention) o.push(`journal ${h.journal_retention}`);
  if (h.idempotency_retention) o.push(`idempotency ${h.idempotency_retention}`);
  if (h.workflow_completion_retention) o.push(`workflow retention ${h.workflow_completion_retention}`);
  if (h.inactivity_timeout) o.push(`inactivity ${h.inactivity_timeout}`);
  if (h.abort_timeout) o.push(`abort ${h.abort_timeout}`);
  if (h.enable_lazy_state !== undefined) o.push(`lazy state ${h.enable_lazy_state ? 'on' : 'off'}`);
  const r = h.retry_policy;
  if (r && Object.keys(r).some((k) => k !== 'max_attempts' || r.max_attempts !== null)) o.push(`retry: ${retry(r)}`);
  return o.join(' · ');
}

function ServiceCard({ s }: { s: Service }) {
  const keyed = s.ty === 'VirtualObject' || s.ty === 'Workflow';
  return (
    <details class="service" id={`svc-${s.name}`}>
      <summary>
        <b>{s.name}</b> <Badge value={s.ty} kind="type" /> <span class="muted">rev {s.revision}</span>{' '}
        <span class="muted">
          · {s.handlers.length} handler{s.handlers.length === 1 ? '' : 's'} · {s.deployment_id}
        </span>
      </summary>
      <div class="service-body">
        {s.documentation && <p>{s.documentation}</p>}
        <div class="links">
          <Link to={href('/invocations', { service: s.name })}>Invocations</Link>
          {keyed && <Link to={href('/state', { service: s.name })}>State</Link>}
          {s.ty === 'Workflow' && <Link to={href('/promises', { service: s.name })}>Promises</Link>}
        </div>
        <dl class="kv">
          <dt>public</dt>
          <dd>{String(s.public ?? true)}</dd>
          <dt>retention</dt>
          <dd>
            journal {s.journal_retention ?? '–'} · idempotency {s.idempotency_retention ?? '–'}
            {s.workflow_completion_retention && ` · workflow ${s.workflow_completion_retention}`}
          </dd>
          <dt>timeouts</dt>
          <dd>
            inactivity {s.inactivity_timeout ?? '–'} · abort {s.abort_timeout ?? '–'}
          </dd>
          <dt>retry</dt>
          <dd>{retry(s.retry_policy)}</dd>
          <dt>lazy state</dt>
          <dd>{String(s.enable_lazy_state ?? false)}</dd>
        </dl>
        {s.info?.map((i) => (
          <p class="note">
            <CodeLink code={i.code} /> {i.message}
          </p>
        ))}
        <div class="table-wrap">
          <table class="data">
            <thead>
              <tr>
                <th>handler</th>
                <th>type</th>
                <th>input → output</th>
                <th>options</th>
              </tr>
            </thead>
            <tbody>
              {s.handlers.map((h) => (
                <tr>
                  <td>
                    <Link to={href('/invocations', { service: s.name, handler: h.name })}>{h.name}</Link>
                  </td>
                  <td>{h.ty ?? (s.ty === 'Service' ? '–' : 'Exclusive')}</td>
                  <td class="mono small">
                    {h.input_description ?? '–'} → {h.output_description ?? '–'}
                  </td>
                  <td class="small">{handlerOptions(h) || <span class="muted">service defaults</span>}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </div>
    </details>
  );
}
