// Exit codes and the errors that carry them. Scripts can rely on these numbers; the README
// lists them.

import { explain } from '../errors/index.js';

export const EXIT = {
  /** Done. */
  OK: 0,
  /** The server answered with an error, refused the request, or some of a bulk action failed. */
  SERVER: 1,
  /** Bad command line: unknown command or option, missing or malformed argument. */
  USAGE: 2,
  /** The deployment, service or invocation named does not exist. */
  NOT_FOUND: 3,
  /** The admin API could not be reached (connection refused, DNS, timeout). */
  UNREACHABLE: 4,
  /** A confirmation was declined, or was needed without a terminal to ask on (use --yes). */
  ABORTED: 5,
} as const;

export interface ErrorDetails {
  /** restate_code of the admin answer (META0006, RT0016, ...). */
  code?: string | null;
  status?: number;
  method?: string;
  url?: string;
  /** One more line telling what to do. */
  hint?: string;
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
    readonly details: ErrorDetails = {},
  ) {
    super(message);
    this.name = 'CliError';
  }
}

export function usage(message: string): CliError {
  return new CliError(message, EXIT.USAGE);
}

export function notFound(message: string): CliError {
  return new CliError(message, EXIT.NOT_FOUND);
}

/** The exit code for an admin API error status. */
export function exitForStatus(status: number): number {
  return status === 404 ? EXIT.NOT_FOUND : EXIT.SERVER;
}

/** Keel prefixes coded messages with `[CODE] ` (sometimes twice); show the code once. */
export function stripCode(message: string, code: string | null | undefined): string {
  if (!code) return message;
  let m = message;
  const prefix = `[${code}] `;
  while (m.startsWith(prefix)) m = m.slice(prefix.length);
  return m;
}

function wrap(text: string, indent: string, width = 88): string[] {
  const lines: string[] = [];
  let line = '';
  for (const w of text.split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + w.length > width - indent.length) {
      lines.push(indent + line);
      line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  if (line) lines.push(indent + line);
  return lines;
}

export interface Paint {
  red(s: string): string;
  bold(s: string): string;
  dim(s: string): string;
  yellow(s: string): string;
}

/** The human rendering of an error, for stderr: message, code with its remedy, where it came from. */
export function renderError(err: CliError, paint: Paint): string {
  const d = err.details;
  const code = d.code ?? undefined;
  const head = code ? `error[${code}]` : 'error';
  const out = [`${paint.red(paint.bold(head))}: ${stripCode(err.message, code)}`];
  if (code) {
    const entry = explain(code);
    if (entry) {
      out.push(`  ${paint.bold(entry.code)} ${entry.title}`);
      out.push(...wrap(`remedy: ${entry.remedy}`, '  '));
      out.push(paint.dim(`  (keel explain ${entry.code} tells more)`));
    }
  }
  if (d.hint) out.push(`  ${paint.yellow('hint:')} ${d.hint}`);
  if (d.status !== undefined && d.url) out.push(paint.dim(`  HTTP ${d.status} from ${d.method ?? 'GET'} ${d.url}`));
  return out.join('\n') + '\n';
}

/** The --json rendering of an error (one line on stderr). */
export function errorJson(err: CliError): string {
  const d = err.details;
  const entry = d.code ? explain(d.code) : undefined;
  return (
    JSON.stringify({
      error: {
        message: stripCode(err.message, d.code),
        restate_code: d.code ?? null,
        ...(entry ? { title: entry.title, remedy: entry.remedy } : {}),
        ...(d.status !== undefined ? { status: d.status } : {}),
        exit_code: err.exitCode,
      },
    }) + '\n'
  );
}
