// Kafka subscriptions and clusters: each subscription's consumer (state, pending invocations, last
// warning) and, per topic partition, Keel's stored position, Kafka's high watermark and the lag
// (GET /subscriptions/{id}/status). A lag Kafka did not report is shown as unknown, not as 0.

import { api, type Subscription, type SubscriptionStatus } from '../api';
import { Badge, ErrorBox, Linkified, Loading, Time, useAsync, useConfirm } from '../components';
import { useState } from 'preact/hooks';

interface Cluster {
  name: string;
  properties: Record<string, string>;
}

export function SubscriptionsPage() {
  const subs = useAsync(() => api<{ subscriptions: Subscription[] }>('GET', '/subscriptions').then((r) => r.data.subscriptions), [], 5000);
  const statuses = useAsync(
    () =>
      Promise.all(
        (subs.data ?? []).map((s) =>
          api<SubscriptionStatus>('GET', `/subscriptions/${encodeURIComponent(s.id)}/status`).then((r) => r.data, () => undefined),
        ),
      ).then((list) => new Map(list.filter((x) => x !== undefined).map((x) => [x.id, x]))),
    [subs.data],
    5000,
  );
  const clusters = useAsync(() => api<{ clusters: Cluster[] }>('GET', '/kafka-clusters').then((r) => r.data.clusters, () => [] as Cluster[]), []);
  const [dialog, ask] = useConfirm();
  const [error, setError] = useState<unknown>(undefined);
  const remove = async (s: Subscription) => {
    if (!(await ask({ title: 'Delete this subscription?', body: <p class="mono">{s.source} → {s.sink}</p>, confirm: 'Delete', danger: true }))) return;
    try {
      await api('DELETE', `/subscriptions/${encodeURIComponent(s.id)}`);
      subs.reload();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div>
      <h1>Subscriptions</h1>
      <p class="muted">
        Kafka topics delivered to handlers, each record once. Position: Keel's stored offset of the next record to deliver, per topic partition;
        lag: records in Kafka beyond it.
      </p>
      <ErrorBox error={subs.error ?? error} />
      {!subs.data ? (
        !subs.error && <Loading />
      ) : subs.data.length === 0 ? (
        <p class="muted">
          No subscriptions. Create one with <code>POST /subscriptions</code> {'{"source":"kafka://cluster/topic","sink":"service://Service/handler"}'}.
        </p>
      ) : (
        <div class="table-wrap">
          <table class="data" id="subscriptions">
            <thead>
              <tr>
                <th>id</th>
                <th>source</th>
                <th>sink</th>
                <th>options</th>
                <th>consumer</th>
                <th>lag</th>
                <th>partitions (position / high watermark)</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {subs.data.map((s) => (
                <tr>
                  <td class="mono">{s.id}</td>
                  <td class="mono">{s.source}</td>
                  <td class="mono">{s.sink}</td>
                  <td class="mono small">
                    {Object.entries(s.options)
                      .map(([k, v]) => `${k}=${v}`)
                      .join(', ')}
                  </td>
                  <ConsumerCells status={statuses.data?.get(s.id)} />
                  <td>
                    <button type="button" class="danger-outline" onClick={() => remove(s)}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h2>Kafka clusters</h2>
      {clusters.data?.length === 0 && <p class="muted">None configured ([[ingress.kafka_clusters]] in config.toml).</p>}
      <ul>
        {(clusters.data ?? []).map((c) => (
          <li>
            <b>{c.name}</b> <span class="mono small">{c.properties['bootstrap.servers'] ?? ''}</span>
          </li>
        ))}
      </ul>
      {dialog}
    </div>
  );
}

function ConsumerCells({ status }: { status: SubscriptionStatus | undefined }) {
  if (!status) return <td class="muted" colSpan={3}>…</td>;
  const lags = status.partitions.map((p) => p.lag);
  const lag = lags.length > 0 && lags.every((l) => l !== null) ? String(lags.reduce((a, b) => a + (b ?? 0), 0)) : 'unknown';
  const skipped = status.partitions.reduce((n, p) => n + p.records_skipped, 0);
  return (
    <>
      <td>
        <Badge value={status.state} kind={status.state === 'consuming' ? 'ok' : status.state === 'failed' ? 'bad' : 'warn'} />
        <div class="small muted">{status.pending_invocations} pending</div>
        {status.reason && <div class="small">{status.reason}</div>}
        {status.last_warning && (
          <div class="small muted">
            <Linkified text={`${status.last_warning.code} ${status.last_warning.message}`} /> <Time iso={status.last_warning.at} />
          </div>
        )}
      </td>
      <td class="mono">{lag}</td>
      <td class="mono small">
        {status.partitions.map((p) => `${p.partition}: ${p.position ?? '–'} / ${p.high_watermark ?? '?'}${p.paused ? ' (paused)' : ''}`).join(', ') || '–'}
        {skipped > 0 && <div>{skipped} skipped</div>}
      </td>
    </>
  );
}
