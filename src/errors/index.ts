import { catalogue } from './catalogue.js';

export { catalogue, explain, type CodeEntry } from './catalogue.js';

/**
 * The one error class that carries a stable code. `status` is the HTTP status an API answers
 * with when this error reaches a client.
 */
export class KeelError extends Error {
  readonly code: string | undefined;
  readonly status: number;

  constructor(code: string | undefined, message: string, status = 500, options?: { cause?: unknown }) {
    super(message, options);
    if (code !== undefined && !catalogue.has(code)) throw new Error(`unknown error code ${code}`);
    this.code = code;
    this.status = status;
    this.name = 'KeelError';
  }

  /** Message with the code in front, as logs and API bodies show it. */
  get display(): string {
    return this.code ? `[${this.code}] ${this.message}` : this.message;
  }
}

export function isKeelError(err: unknown): err is KeelError {
  return err instanceof KeelError;
}
