// The error catalogue: GET /errors/{code} for one code, and the codes the invocations show now.

import { useState } from 'preact/hooks';
import { explain, sql } from '../api';
import { CodeLink, ErrorBox, Loading, useAsync } from '../components';
import { href, Link, navigate } from '../router';

export function ErrorPage({ code }: { code: string }) {
  const e = useAsync(() => explain(code), [code]);
  return (
    <div class="narrow">
      <p>
        <Link to="/errors">Error catalogue</Link>
      </p>
      <ErrorBox error={e.error} />
      {e.data === undefined ? (
        !e.error && <Loading />
      ) : e.data === null ? (
        <>
          <h1 class="mono">{code}</h1>
          <p id="unknown-code">Keel does not know the code {code}.</p>
        </>
      ) : (
        <article class="error-entry" id="error-entry">
          <h1>
            <span class="mono">{e.data.code}</span> {e.data.title}
          </h1>
          <h2>When</h2>
          <p>{e.data.condition}</p>
          <h2>What to do</h2>
          <p>{e.data.remedy}</p>
          <p>
            <Link to={href('/invocations', { code: e.data.code })}>Invocations whose last failure is {e.data.code}</Link>
          </p>
        </article>
      )}
    </div>
  );
}

export function ErrorsIndexPage() {
  const [code, setCode] = useState('');
  const seen = useAsync(
    () =>
      sql(
        "SELECT last_failure_error_code AS code, COUNT(*) AS n FROM sys_invocation WHERE last_failure_error_code IS NOT NULL GROUP BY last_failure_error_code ORDER BY n DESC",
      ),
    [],
  );
  return (
    <div class="narrow">
      <h1>Error catalogue</h1>
      <p class="muted">Every stable code Keel puts in logs, admin errors and invocation failures, with its condition and remedy.</p>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          if (code.trim()) navigate(`/errors/${encodeURIComponent(code.trim().toUpperCase())}`);
        }}
      >
        <label>
          <span>code</span>
          <input value={code} onInput={(e) => setCode(e.currentTarget.value)} placeholder="RT0016" />
        </label>
        <div class="filter-actions">
          <button type="submit" class="primary">
            Explain
          </button>
        </div>
      </form>
      <h2>Codes in the invocations now</h2>
      <ErrorBox error={seen.error} />
      {!seen.data ? (
        !seen.error && <Loading />
      ) : seen.data.length === 0 ? (
        <p class="muted">No invocation has a failure now.</p>
      ) : (
        <ul>
          {seen.data.map((r) => (
            <li>
              <CodeLink code={String(r.code)} /> · <Link to={href('/invocations', { code: String(r.code) })}>{String(r.n)} invocations</Link>
            </li>
          ))}
        </ul>
      )}
      <h2>Common codes</h2>
      <ul class="inline-list">
        {['META0003', 'META0004', 'META0006', 'RT0001', 'RT0002', 'RT0007', 'RT0012', 'RT0016', 'RT0021'].map((c) => (
          <li>
            <CodeLink code={c} />
          </li>
        ))}
      </ul>
    </div>
  );
}
