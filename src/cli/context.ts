// What every command gets: the admin client, the output mode, and the two interactive pieces
// (confirmation, spinner), which draw on stderr so that stdout stays data. The prompt library
// loads only when a terminal needs it.

import { AdminClient } from './admin.js';
import { CliError, EXIT } from './errors.js';
import { colorsFor, promptStream, type Colors } from './output.js';

export interface GlobalOptions {
  adminUrl: string;
  json?: boolean;
  yes?: boolean;
  color?: boolean;
}

export class Ctx {
  readonly admin: AdminClient;
  readonly json: boolean;
  readonly yes: boolean;
  /** Colours of stdout. */
  readonly c: Colors;
  /** Colours of stderr (messages, prompts). */
  readonly ec: Colors;

  constructor(opts: GlobalOptions) {
    this.admin = new AdminClient(opts.adminUrl);
    this.json = opts.json === true;
    this.yes = opts.yes === true;
    this.c = colorsFor(process.stdout, opts.color !== false);
    this.ec = colorsFor(process.stderr, opts.color !== false);
  }

  /** Both ends of a conversation are a terminal. */
  get interactive(): boolean {
    return process.stdin.isTTY === true && process.stderr.isTTY === true;
  }

  /** A progress note on stderr (not in --json mode). */
  note(text: string): void {
    if (!this.json) process.stderr.write(text.endsWith('\n') ? text : text + '\n');
  }

  /**
   * Asks `question` (default no). Passes at once with --yes; without a terminal to ask on it
   * refuses with exit code 5, changing nothing.
   */
  async confirm(question: string): Promise<void> {
    if (this.yes) return;
    if (!this.interactive) {
      throw new CliError(`confirmation needed ("${question}") and there is no terminal to ask on: nothing was changed`, EXIT.ABORTED, {
        hint: 'pass --yes (-y) to confirm in scripts',
      });
    }
    const { confirm, isCancel } = await import('@clack/prompts');
    const answer = await confirm({ message: question, initialValue: false, output: promptStream(this.ec.enabled) });
    if (isCancel(answer) || answer !== true) throw new CliError('aborted: nothing was changed', EXIT.ABORTED);
  }

  /** Runs `work` under a spinner on stderr when it is a terminal (plain otherwise). */
  async spin<T>(message: string, work: () => Promise<T>, done?: (r: T) => string): Promise<T> {
    if (process.stderr.isTTY !== true) return work();
    const { spinner } = await import('@clack/prompts');
    const s = spinner({ output: promptStream(this.ec.enabled) });
    s.start(message);
    try {
      const r = await work();
      s.stop(done ? done(r) : message);
      return r;
    } catch (err) {
      s.error(`${message}: failed`);
      throw err;
    }
  }
}
