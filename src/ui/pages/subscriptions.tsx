// Kafka subscriptions and clusters. Keel validates and stores subscriptions but does not consume
// Kafka yet, so there is no lag to show: the page says so rather than showing a made-up number.

import { api, type Subscription } from '../api';
import { ErrorBox, Loading, useAsync, useConfirm } from '../components';
import { useState } from 'preact/hooks';

interface Cluster {
  name: string;
  properties: Record<string, string>;
}

export function SubscriptionsPage() {
  const subs = useAsync(() => api<{ subscriptions: Subscription[] }>('GET', '/subscriptions').then((r) => r.data.subscriptions), [], 5000);
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
        Kafka topics delivered to handlers. Keel stores and validates subscriptions; it does not consume records yet, so there is no consumer lag to
        show.
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
                <th>lag</th>
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
                  <td class="muted">not consumed</td>
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
