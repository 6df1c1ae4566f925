import pino, { type Logger } from 'pino';

export type { Logger } from 'pino';

/** pino's numeric level of `warn`. */
const WARN = 40;

/**
 * One root logger: pretty on a TTY, JSON lines otherwise. Error lines carry `code` when the
 * error has one, so `grep RT0007` finds every retryable handler failure. `onCode` hears the code
 * of every line written at warn level or above (for the errors-by-code metric).
 */
export function createLogger(level: string, format: 'pretty' | 'json' | 'auto', onCode?: (code: string) => void): Logger {
  const pretty = format === 'pretty' || (format === 'auto' && process.stdout.isTTY === true);
  return pino({
    level,
    base: { name: 'keel' },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...(onCode ? { hooks: { logMethod: codeHook(onCode) } } : {}),
    ...(pretty ? { transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' } } } : {}),
  });
}

/** A logger that drops everything, for unit tests of modules that log. */
export const silentLogger: Logger = pino({ level: 'silent' });

/** A pino logMethod hook that reports the `code` of the line's object, when it has one. */
function codeHook(onCode: (code: string) => void) {
  return function (this: Logger, args: Parameters<Logger['info']>, method: (...a: unknown[]) => void, level: number): void {
    const first: unknown = args[0];
    if (level >= WARN && typeof first === 'object' && first !== null) {
      const code = (first as { code?: unknown }).code;
      if (typeof code === 'string') onCode(code);
    }
    method.apply(this, args);
  };
}

/** kafkajs's negative timer (see logProcessWarnings): known and harmless. */
export function isKafkajsTimerWarning(warning: Error): boolean {
  return warning.name === 'TimeoutNegativeWarning' && /[\\/]kafkajs[\\/]/.test(warning.stack ?? '');
}

/**
 * Process warnings as log lines of their own (Node writes them to stderr as loose text between
 * the JSON lines). One is known and harmless, so it is a debug line: kafkajs's idle request queue
 * sets a timer for a negative delay (`throttledUntil - Date.now()` before any throttling), which
 * Node ≥ 22 reports as TimeoutNegativeWarning and clamps to 1 ms.
 */
export function logProcessWarnings(logger: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (warning) => {
    const known = isKafkajsTimerWarning(warning);
    const fields = { warning: warning.name, ...('code' in warning && typeof warning.code === 'string' ? { node_code: warning.code } : {}) };
    if (known) logger.debug(fields, `kafkajs: ${warning.message}`);
    else logger.warn({ ...fields, stack: warning.stack }, `node: ${warning.message}`);
  });
}
