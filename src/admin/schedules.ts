// Schedules as the admin API and the configuration give them: the body of PUT /schedules/{name}
// (or a [[schedules]] table of config.toml) checked against the registered services and made
// into the spec the fold keeps, the view the API shows, and the schedules the configuration declares.
import type { Logger } from '../common/logger.js';
import { DEFAULT_LATE_AFTER_MS, MIN_EVERY_MS, cronProblem } from '../common/schedule-times.js';
import { formatDuration, parseDuration_ms } from '../common/units.js';
import type { Config } from '../config/index.js';
import { KeelError, keelError } from '../errors/index.js';
import { NotLedHereError } from '../partition/errors.js';
import { ScheduleAction, type ScheduleSpec } from '../log/commands.js';
import type { Registry } from '../metadata/registry.js';
import { resolveTarget } from '../metadata/targets.js';
import { CATCH_UPS, OVERLAPS, scheduleTarget, type ScheduleRecord } from '../storage/tables/schedules.js';
import type { IntrospectionSource } from './introspection.js';

const NAME = /^[A-Za-z0-9_.-]{1,128}$/;
const FIELDS = new Set(['target', 'cron', 'timezone', 'every', 'input', 'overlap', 'catchup', 'late_after', 'paused']);
/** The longest interval: a century (what a timer of the store holds with room to spare). */
const MAX_EVERY_MS = 100 * 365 * 86_400_000;
const MAX_INPUT_BYTES = 64 * 1024;

const invalid = (why: string): KeelError => new KeelError('KEEL1001', why);
const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

export function checkScheduleName(name: string): void {
  if (!NAME.test(name)) throw invalid(`the schedule name '${name.slice(0, 140)}' is not valid: 1 to 128 characters of [A-Za-z0-9_.-]`);
}

/** `Service/handler`, `Object/key/handler`, or {service, key?, handler}. */
function targetOf(v: unknown): { service: string; key: string; handler: string } {
  if (typeof v === 'string') {
    const parts = v.split('/');
    if (parts.length === 2) return { service: parts[0]!, key: '', handler: parts[1]! };
    if (parts.length === 3) return { service: parts[0]!, key: parts[1]!, handler: parts[2]! };
  } else if (isMap(v) && typeof v.service === 'string' && typeof v.handler === 'string' && (v.key === undefined || typeof v.key === 'string')) {
    return { service: v.service, key: (v.key as string | undefined) ?? '', handler: v.handler };
  }
  throw invalid('the field target must be "Service/handler", "Object/key/handler" or {"service", "key", "handler"}');
}

function choice<T extends string>(v: unknown, field: string, allowed: readonly T[], fallback: T): T {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'string' || !allowed.includes(v as T)) throw invalid(`the field ${field} must be one of ${allowed.join(', ')}: got ${JSON.stringify(v).slice(0, 40)}`);
  return v as T;
}

/** When the schedule fires: a cron expression (with a time zone) or an interval, exactly one. */
function timesOf(body: Record<string, unknown>): Pick<ScheduleSpec, 'cron' | 'timezone' | 'every_ms'> {
  const { cron, timezone, every } = body;
  if ((cron === undefined) === (every === undefined)) throw invalid('give exactly one of the fields cron (a cron expression) and every (an interval such as "10m")');
  if (cron !== undefined) {
    if (typeof cron !== 'string') throw invalid('the field cron must be a string such as "0 9 * * MON-FRI"');
    if (timezone !== undefined && typeof timezone !== 'string') throw invalid('the field timezone must be an IANA time zone name such as "Europe/Berlin"');
    const problem = cronProblem(cron, timezone || undefined, Date.now());
    if (problem !== undefined) throw invalid(problem);
    return { cron, ...(timezone ? { timezone } : {}) };
  }
  if (timezone !== undefined) throw invalid('the field timezone goes with cron, not with every');
  const ms = typeof every === 'string' ? parseDuration_ms(every) : undefined;
  if (ms === undefined || ms < MIN_EVERY_MS || ms > MAX_EVERY_MS) {
    throw invalid(`the field every must be an interval from ${formatDuration(MIN_EVERY_MS)} to 100 years such as "30s" or "1h 30m": got ${JSON.stringify(every).slice(0, 40)}`);
  }
  return { every_ms: ms };
}

/** How late a firing may start before it counts as missed (default: a minute). */
function lateAfterOf(v: unknown): number {
  if (v === undefined || v === null) return DEFAULT_LATE_AFTER_MS;
  const ms = typeof v === 'string' ? parseDuration_ms(v) : undefined;
  if (ms === undefined || ms < MIN_EVERY_MS || ms > MAX_EVERY_MS) throw invalid(`the field late_after must be a duration of at least 1s such as "1m": got ${JSON.stringify(v).slice(0, 40)}`);
  return ms;
}

function inputOf(body: Record<string, unknown>): Pick<ScheduleSpec, 'input' | 'headers'> {
  if (body.input === undefined) return { input: Buffer.alloc(0), headers: [] };
  const input = Buffer.from(JSON.stringify(body.input));
  if (input.length > MAX_INPUT_BYTES) throw invalid(`the field input is ${input.length} bytes of JSON, more than ${MAX_INPUT_BYTES}`);
  return { input, headers: [{ key: 'content-type', value: 'application/json' }] };
}

/** The body of PUT /schedules/{name}, checked against the registered services. */
export function scheduleSpec(ctx: { config: Config; registry: Registry }, body: unknown): ScheduleSpec {
  if (!isMap(body)) throw keelError('KEEL0001', { why: 'send a JSON object with target and cron or every' });
  // A misspelt field would otherwise be a default taken silently (a cron in UTC, say).
  for (const k of Object.keys(body)) if (!FIELDS.has(k)) throw invalid(`unknown field '${k.slice(0, 40)}': a schedule takes ${[...FIELDS].join(', ')}`);
  const target = targetOf(body.target);
  const service = ctx.registry.service(target.service);
  if (service === undefined) throw invalid(`the target service '${target.service}' is not registered`);
  const handler = service.handlers.find((h) => h.name === target.handler);
  if (handler === undefined) throw invalid(`the target service '${target.service}' has no handler '${target.handler}'`);
  if (service.ty === 'Service' && target.key !== '') throw invalid(`'${target.service}' is a Service: its target has no key ("${target.service}/${target.handler}")`);
  if (service.ty !== 'Service' && target.key === '') throw invalid(`'${target.service}' is a ${service.ty}: its target needs a key ("${target.service}/{key}/${target.handler}")`);
  if (typeof body.paused !== 'undefined' && typeof body.paused !== 'boolean') throw invalid('the field paused must be true or false');
  // Retention as an idempotent call of the target has it (a workflow run: as a run).
  const resolved = resolveTarget(ctx.config, service, handler, target.key, 'schedule');
  return {
    service: service.name, handler: handler.name, key: target.key, ...inputOf(body),
    service_type: resolved.service_type, handler_type: resolved.handler_type,
    completion_retention_ms: resolved.completion_retention_ms, journal_retention_ms: resolved.journal_retention_ms,
    ...timesOf(body),
    overlap: choice(body.overlap, 'overlap', OVERLAPS, 'skip'),
    catchup: choice(body.catchup, 'catchup', CATCH_UPS, 'one'),
    late_after_ms: lateAfterOf(body.late_after),
    paused: body.paused === true,
  };
}

const at = (ms: number | undefined): string | null => (ms === undefined ? null : new Date(ms).toISOString());


/** A schedule as the API shows it. */
export function scheduleView(s: ScheduleRecord): Record<string, unknown> {
  const o = s.last_outcome;
  return {
    name: s.name,
    target: scheduleTarget(s),
    ...(s.input.length > 0 ? { input: JSON.parse(s.input.toString('utf8')) as unknown } : {}),
    ...(s.cron !== undefined ? { cron: s.cron, timezone: s.timezone ?? 'UTC' } : { every: formatDuration(s.every_ms ?? 0) }),
    overlap: s.overlap,
    catchup: s.catchup,
    late_after: formatDuration(s.late_after_ms),
    paused: s.paused,
    ...(s.from_config ? { managed_by: 'config' } : {}),
    next_fire_at: at(s.next_at_ms),
    last_fire_at: at(s.last_fire_ms),
    last_invocation_id: s.last_invocation_id ?? null,
    running: s.running ? { invocation_id: s.running.invocation_id, fire_at: at(s.running.fire_ms) } : null,
    last_outcome: o
      ? { status: o.failure ? 'failed' : 'succeeded', invocation_id: o.invocation_id ?? null, fire_at: at(o.fire_ms), ended_at: at(o.ended_at_ms), ...(o.failure ? { failure: o.failure } : {}) }
      : null,
    fired: s.fired,
    skipped: s.skipped,
    queued: [...s.queued, ...(s.buffered_ms !== undefined ? [s.buffered_ms] : [])].map((ms) => at(ms)),
    created_at: at(s.created_at_ms),
    modified_at: at(s.modified_at_ms),
  };
}


type ScheduleSource = Required<Pick<IntrospectionSource, 'schedules' | 'applySchedule'>>;

/**
 * The schedules of config.toml, kept as declared: each is set (no change when it is the same),
 * and one the configuration no longer declares is deleted. One whose target is not registered
 * yet waits for the next change of the services (logged once per reason).
 */
export class ConfiguredSchedules {
  private readonly told = new Map<string, string>();

  constructor(
    private readonly deps: { config: Config; registry: Registry },
    private readonly logger: Logger,
  ) {}

  async apply(source: ScheduleSource): Promise<void> {
    const declared = this.deps.config.schedules;
    for (const { name, body } of declared) {
      let spec: ScheduleSpec;
      try {
        checkScheduleName(name);
        spec = scheduleSpec(this.deps, body);
      } catch (err) {
        const why = (err as Error).message;
        if (this.told.get(name) !== why) this.logger.warn({ code: (err as KeelError).code ?? 'KEEL1001', schedule: name }, `the schedule '${name}' of the configuration is not applied: ${why}`);
        this.told.set(name, why);
        continue;
      }
      this.told.delete(name);
      await ledHere(() => source.applySchedule({ action: ScheduleAction.SET, name, spec: { ...spec, from_config: true } }));
    }
    const names = new Set(declared.map((d) => d.name));
    const gone: string[] = [];
    for await (const s of source.schedules()) if (s.from_config && !names.has(s.name)) gone.push(s.name);
    for (const name of gone) {
      if (await ledHere(() => source.applySchedule({ action: ScheduleAction.DELETE, name }))) this.logger.info({ schedule: name }, 'schedule deleted: the configuration no longer declares it');
    }
  }
}

/**
 * Whether the change was made: false where another node of a cluster leads the schedule's
 * partition (every node applies the configuration to the partitions it leads, as it opens them).
 */
async function ledHere(change: () => Promise<void>): Promise<boolean> {
  try {
    await change();
    return true;
  } catch (err) {
    if (err instanceof NotLedHereError) return false;
    throw err;
  }
}
