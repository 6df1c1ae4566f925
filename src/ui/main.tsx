// Keel's admin UI: a Preact single-page app on the public admin API, served at /ui.

import { render } from 'preact';
import { useEffect } from 'preact/hooks';
import { Link, match, useLocation } from './router';
import { OverviewPage } from './pages/overview';
import { RegisterPage } from './pages/register';
import { InvocationsPage } from './pages/invocations';
import { InvocationPage } from './pages/invocation';
import { StateIndexPage, StatePage } from './pages/state';
import { PromisesPage } from './pages/promises';
import { SchedulesPage } from './pages/schedules';
import { SubscriptionsPage } from './pages/subscriptions';
import { SqlPage } from './pages/sql';
import { ErrorPage, ErrorsIndexPage } from './pages/errors';
import { ClusterPage } from './pages/cluster';
import { FlowPage } from './pages/flow';
import './style.css';

const NAV: Array<[path: string, label: string]> = [
  ['/', 'Overview'],
  ['/register', 'Register'],
  ['/invocations', 'Invocations'],
  ['/state', 'State'],
  ['/promises', 'Promises'],
  ['/subscriptions', 'Subscriptions'],
  ['/schedules', 'Schedules'],
  ['/flow', 'Flow control'],
  ['/sql', 'SQL'],
  ['/errors', 'Errors'],
  ['/cluster', 'Cluster'],
];

function route(path: string, query: URLSearchParams) {
  let m: Record<string, string> | null;
  if (path === '/') return { title: 'Overview', page: <OverviewPage /> };
  if (path === '/register') return { title: 'Register a deployment', page: <RegisterPage /> };
  if (path === '/invocations') return { title: 'Invocations', page: <InvocationsPage query={query} /> };
  if ((m = match('/invocations/:id', path))) return { title: m.id!, page: <InvocationPage key={m.id} id={m.id!} /> };
  if (path === '/state') return { title: 'State', page: <StateIndexPage query={query} /> };
  if ((m = match('/state/:service/:key', path))) return { title: `${m.service}/${m.key}`, page: <StatePage key={`${m.service}/${m.key}`} service={m.service!} objectKey={m.key!} /> };
  if (path === '/promises') return { title: 'Promises', page: <PromisesPage query={query} /> };
  if (path === '/subscriptions') return { title: 'Subscriptions', page: <SubscriptionsPage /> };
  if (path === '/schedules') return { title: 'Schedules', page: <SchedulesPage /> };
  if (path === '/flow') return { title: 'Flow control', page: <FlowPage /> };
  if (path === '/sql') return { title: 'SQL', page: <SqlPage query={query} /> };
  if (path === '/errors') return { title: 'Errors', page: <ErrorsIndexPage /> };
  if (path === '/cluster') return { title: 'Cluster', page: <ClusterPage /> };
  if ((m = match('/errors/:code', path))) return { title: m.code!, page: <ErrorPage key={m.code} code={m.code!} /> };
  return {
    title: 'Not found',
    page: (
      <div>
        <h1>Not found</h1>
        <p>
          Nothing here. Go to the <Link to="/">overview</Link>.
        </p>
      </div>
    ),
  };
}

function App() {
  const { path, query } = useLocation();
  const { title, page } = route(path, query);
  useEffect(() => {
    document.title = `${title} · Keel`;
  }, [title]);
  const section = '/' + (path.split('/')[1] ?? '');
  return (
    <div class="shell">
      <header class="top">
        <Link to="/" class="brand">
          Keel
        </Link>
        <nav aria-label="Main">
          {NAV.map(([p, label]) => (
            <Link to={p} class={section === p ? 'active' : ''} aria-current={section === p ? 'page' : undefined}>
              {label}
            </Link>
          ))}
        </nav>
      </header>
      <main>{page}</main>
    </div>
  );
}

render(<App />, document.getElementById('app')!);
