// Workflow promises (sys_promise): which are resolved, with what, per workflow key.

import { api, lit, sql, type Service } from '../api';
import { Badge, ErrorBox, Linkified, Loading, useAsync } from '../components';
import { href, Link, navigate } from '../router';

export function PromisesPage({ query }: { query: URLSearchParams }) {
  const service = query.get('service') ?? '';
  const key = query.get('key') ?? '';
  const workflows = useAsync(() => api<{ services: Service[] }>('GET', '/services').then((r) => r.data.services.filter((s) => s.ty === 'Workflow')), []);
  const rows = useAsync(() => {
    const c: string[] = [];
    if (service) c.push(`service_name = ${lit(service)}`);
    if (key) c.push(`service_key = ${lit(key)}`);
    const where = c.length ? `WHERE ${c.join(' AND ')}` : '';
    return sql(
      `SELECT service_name, service_key, key, completed, completion_success_value_utf8, completion_success_value, completion_failure FROM sys_promise ${where} ORDER BY service_name, service_key, key LIMIT 500`,
    );
  }, [service, key], 3000);
  const set = (p: Record<string, string>) => navigate(href('/promises', { service, key, ...p }), { replace: true });
  return (
    <div>
      <h1>Workflow promises</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          <span>workflow</span>
          <select value={service} onChange={(e) => set({ service: e.currentTarget.value })}>
            <option value="">any</option>
            {(workflows.data ?? []).map((s) => (
              <option value={s.name}>{s.name}</option>
            ))}
          </select>
        </label>
        <label>
          <span>key</span>
          <input value={key} placeholder="any" onChange={(e) => set({ key: e.currentTarget.value })} />
        </label>
      </form>
      <ErrorBox error={rows.error} />
      {!rows.data ? (
        !rows.error && <Loading />
      ) : rows.data.length === 0 ? (
        <p class="muted">No promises{service || key ? ' match' : ' yet'}.</p>
      ) : (
        <div class="table-wrap">
          <table class="data" id="promises">
            <thead>
              <tr>
                <th>workflow / key</th>
                <th>promise</th>
                <th>state</th>
                <th>value or failure</th>
              </tr>
            </thead>
            <tbody>
              {rows.data.map((r) => (
                <tr>
                  <td class="mono">
                    {String(r.service_name)} /{' '}
                    <Link to={`/state/${encodeURIComponent(String(r.service_name))}/${encodeURIComponent(String(r.service_key))}`}>{String(r.service_key)}</Link>
                  </td>
                  <td class="mono">{String(r.key)}</td>
                  <td>
                    <Badge value={r.completed ? (r.completion_failure ? 'failure' : 'completed') : 'pending'} />
                  </td>
                  <td class="mono wrap">
                    {r.completion_failure !== undefined ? (
                      <Linkified text={String(r.completion_failure)} />
                    ) : r.completion_success_value_utf8 !== undefined ? (
                      String(r.completion_success_value_utf8)
                    ) : r.completion_success_value !== undefined ? (
                      `0x${String(r.completion_success_value)}`
                    ) : (
                      ''
                    )}
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
