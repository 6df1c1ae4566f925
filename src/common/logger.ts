import pino, { type Logger } from 'pino';

export type { Logger } from 'pino';

/**
 * One root logger: pretty on a TTY, JSON lines otherwise. Error lines carry `code` when the
 * error has one, so `grep RT0007` finds every retryable handler failure.
 */
export function createLogger(level: string, format: 'pretty' | 'json' | 'auto'): Logger {
  const pretty = format === 'pretty' || (format === 'auto' && process.stdout.isTTY === true);
  return pino({
    level,
    base: { name: 'keel' },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...(pretty ? { transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' } } } : {}),
  });
}

/** A logger that drops everything, for unit tests of modules that log. */
export const silentLogger: Logger = pino({ level: 'silent' });
