#!/usr/bin/env node
// The `keel` command-line client: talks to Keel's admin API over HTTP only (the same API the
// restate CLI uses), so it works against any Keel (or Restate) admin endpoint.

import { Command, CommanderError } from 'commander';
import { Ctx, type GlobalOptions } from './context.js';
import { CliError, EXIT, errorJson, renderError } from './errors.js';
import { colorsFor } from './output.js';
import { deploymentsCommand } from './commands/deployments.js';
import { explainCommand } from './commands/explain.js';
import { invocationsCommand } from './commands/invocations.js';
import { schedulesCommand } from './commands/schedules.js';
import { servicesCommand } from './commands/services.js';
import { sqlCommand } from './commands/sql.js';
import { stateCommand } from './commands/state.js';

const DEFAULT_ADMIN_URL = 'http://localhost:9070';

const EPILOG = `
Environment:
  KEEL_ADMIN_URL   admin API URL when --admin-url is not given (default ${DEFAULT_ADMIN_URL})
  KEEL_AUTH_TOKEN  bearer token when the admin API requires one (admin.auth_token); RESTATE_AUTH_TOKEN works too
  NO_COLOR         no colours (colours are only used on a terminal anyway)

Exit codes:
  0  done
  1  the server answered with an error or refused; some of a bulk action failed
  2  usage: unknown command or option, bad argument
  3  not found: the deployment, service, invocation, state entry or schedule does not exist
  4  the admin API cannot be reached
  5  not confirmed: the prompt was declined, or there was no terminal to ask on (use --yes)
`;

export function buildProgram(): Command {
  const program = new Command('keel');
  program
    .description('Command-line client for Keel, the durable execution server')
    .option('--admin-url <url>', 'admin API URL (env KEEL_ADMIN_URL)', process.env.KEEL_ADMIN_URL || DEFAULT_ADMIN_URL)
    .option('--json', 'print JSON on stdout instead of tables')
    .option('-y, --yes', 'confirm without asking (for scripts)')
    .option('--no-color', 'no colours')
    .showHelpAfterError('(keel --help for usage)')
    .exitOverride()
    .addHelpText('after', EPILOG);
  const ctxOf = (cmd: Command) => new Ctx(cmd.optsWithGlobals() as GlobalOptions);
  deploymentsCommand(program, ctxOf);
  servicesCommand(program, ctxOf);
  invocationsCommand(program, ctxOf);
  stateCommand(program, ctxOf);
  schedulesCommand(program, ctxOf);
  sqlCommand(program, ctxOf);
  explainCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.OK;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version exit 0; a missing command, unknown option, bad argument: usage
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' ? EXIT.OK : EXIT.USAGE;
    }
    const opts = program.opts() as Partial<GlobalOptions>;
    const e = err instanceof CliError ? err : new CliError(`internal error: ${(err as Error)?.stack ?? String(err)}`, EXIT.SERVER);
    process.stderr.write(opts.json ? errorJson(e) : renderError(e, colorsFor(process.stderr, opts.color !== false)));
    return e.exitCode;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`keel: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exitCode = EXIT.SERVER;
  },
);
