import { existsSync } from 'node:fs';
import { installLeanAsyncBind } from './common/async-bind.js';
import { loadConfig } from './config/index.js';
import { createLogger, logProcessWarnings } from './common/logger.js';
import { isKeelError } from './errors/index.js';
import { KeelServer } from './server.js';

function configFile(argv: string[]): string | undefined {
  const i = argv.findIndex((a) => a === '--config' || a === '-c');
  if (i >= 0) return argv[i + 1];
  const eq = argv.find((a) => a.startsWith('--config='));
  if (eq) return eq.slice('--config='.length);
  // Without --config, ./config.toml is read when present (the defaults live there).
  return existsSync('config.toml') ? 'config.toml' : undefined;
}

async function main(): Promise<void> {
  // Node's HTTP/2 client binds a function per request; the server sends one per invocation.
  installLeanAsyncBind();
  const early = createLogger(process.env.KEEL_LOG__LEVEL ?? 'info', 'auto');
  logProcessWarnings(early);
  let server: KeelServer;
  try {
    const config = loadConfig(configFile(process.argv.slice(2)));
    server = await KeelServer.start(config);
    logProcessWarnings(server.logger);
  } catch (err) {
    // A failure without a code is still the start's last line, with its stack, not an unhandled rejection's trace.
    if (isKeelError(err)) early.fatal({ code: err.code }, err.display);
    else early.fatal({ err }, `the server could not start: ${(err as Error)?.message ?? String(err)}`);
    // stdout may be a pipe; let pino flush before leaving.
    setTimeout(() => process.exit(1), 50);
    return;
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    server.logger.info({ signal }, 'shutting down');
    server.stop().then(
      () => process.exit(0),
      (err) => {
        server.logger.error({ err }, 'unclean shutdown');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

void main();
