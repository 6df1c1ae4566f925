// The admin API client: plain HTTP/1.1 JSON requests under /v4, as the restate CLI sends them.
// Every failure becomes a CliError with the exit code scripts rely on.

import { CliError, EXIT, exitForStatus, usage } from './errors.js';

export type Row = Record<string, unknown>;

export interface AdminAnswer {
  status: number;
  text: string;
  json: unknown;
}

const API = '/v4';

export class AdminClient {
  readonly base: string;
  /** Bearer token for an admin API behind admin.auth_token (KEEL_AUTH_TOKEN, or the restate CLI's RESTATE_AUTH_TOKEN). */
  private readonly token = process.env.KEEL_AUTH_TOKEN || process.env.RESTATE_AUTH_TOKEN || undefined;

  constructor(baseUrl: string, private readonly timeout_ms = 60_000) {
    let u: URL;
    try {
      u = new URL(baseUrl);
    } catch {
      throw usage(`--admin-url: '${baseUrl}' is not a URL (expected e.g. http://localhost:9070)`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw usage(`--admin-url: '${baseUrl}' must be an http:// or https:// URL`);
    this.base = u.toString().replace(/\/+$/, '');
  }

  url(path: string): string {
    return `${this.base}${API}${path}`;
  }

  /** Any request; never throws on an HTTP status, only when the server cannot be reached. */
  async request(method: string, path: string, body?: unknown, accept = 'application/json'): Promise<AdminAnswer> {
    const url = this.url(path);
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: {
          accept,
          'user-agent': 'keel-cli',
          ...(this.token !== undefined ? { authorization: `Bearer ${this.token}` } : {}),
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeout_ms),
      });
    } catch (err) {
      const e = err as { name?: string; cause?: { code?: string; message?: string }; message?: string };
      const why = e.name === 'TimeoutError' ? `no answer within ${this.timeout_ms / 1000}s` : (e.cause?.code ?? e.cause?.message ?? e.message ?? String(err));
      throw new CliError(`cannot reach the Keel admin API at ${this.base} (${why})`, EXIT.UNREACHABLE, {
        hint: 'is Keel running? Point the CLI at it with --admin-url or KEEL_ADMIN_URL.',
      });
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    return { status: res.status, text, json };
  }

  /** A request that must succeed (2xx); the admin error body becomes a CliError. */
  async call<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    const a = await this.request(method, path, body);
    if (a.status >= 400) throw adminError(method, this.url(path), a);
    return a.json as T;
  }

  /** SQL over `POST /query`, rows as JSON objects (null columns may be absent). */
  async query(sql: string): Promise<Row[]> {
    const rows = (await this.call<{ rows?: Row[] }>('POST', '/query', { query: sql }))?.rows;
    if (!Array.isArray(rows)) throw new CliError('the admin API answered /query without rows', EXIT.SERVER);
    return rows;
  }
}

export function adminError(method: string, url: string, a: AdminAnswer): CliError {
  const body = (a.json ?? {}) as { message?: unknown; restate_code?: unknown };
  const message = typeof body.message === 'string' ? body.message : a.text.trim() || `HTTP ${a.status}`;
  const code = typeof body.restate_code === 'string' ? body.restate_code : null;
  return new CliError(message, exitForStatus(a.status), { code, status: a.status, method, url });
}
