import { catalogue, type ErrorCode } from './catalogue.js';

export { catalogue, explain, type CodeEntry, type ErrorCode } from './catalogue.js';

/**
 * The one error class users see: it always carries a stable code from the catalogue, and the
 * HTTP status the catalogue gives that code. Throw sites name the code, never a status: the
 * only other status is `relayed`, the answer of another node passed on as it came.
 */
export class KeelError extends Error {
  readonly code: ErrorCode;
  readonly status: number;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; relayed?: number }) {
    super(message, options);
    const entry = catalogue.get(code);
    if (entry === undefined) throw new Error(`unknown error code ${code}`);
    this.code = code;
    this.status = options?.relayed ?? entry.status;
    this.name = 'KeelError';
  }

  /** Message with the code in front, as logs and API bodies show it. */
  get display(): string {
    return `[${this.code}] ${this.message}`;
  }
}

export function isKeelError(err: unknown): err is KeelError {
  return err instanceof KeelError;
}

/** Message templates of the errors raised in more than one place, by code. */
const templates = {
  KEEL0001: (p: { why: string }) => `the request body is not valid: ${p.why}`,
  KEEL0002: (p: { field: string; expected: string }) => `the field ${p.field} must be ${p.expected}`,
  KEEL0003: (p: { what: string; value: string }) => `Invalid URL: Cannot parse \`${p.what}\` with value \`${p.value}\`: not a ${p.what} id`,
  KEEL0004: (p: { what: string; name: string }) => `The requested ${p.what} '${p.name}' does not exist`,
  KEEL0501: (p: { partition: number; queued: number }) => `partition ${p.partition} is overloaded (${p.queued} commands or invocations wait): retry later`,
  KEEL0502: (p: { partition?: number; what?: string }) => `${p.what ?? `partition ${p.partition}`} is closed: the server is shutting down`,
  KEEL0503: (p: { partition: number; reason: string }) => `partition ${p.partition} stopped (${p.reason}): it accepts nothing until the server restarts`,
} as const;

type Templated = keyof typeof templates;

/** Makes a templated error: the message comes from the template of `code`, the status from the catalogue. */
export function keelError<C extends Templated>(code: C, params: Parameters<(typeof templates)[C]>[0]): KeelError {
  const template = templates[code] as (p: typeof params) => string;
  return new KeelError(code, template(params));
}
