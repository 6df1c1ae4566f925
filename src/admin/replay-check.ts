// The replay check's admin side (POST /deployments/replay-check, and `replay_check` in POST
// /deployments): discovers the endpoint without registering it, picks the suspended invocations
// the new code would take over, replays each journal against it (invoker/replay-check.ts) and
// reports. An invocation resumes on the deployment it started on (pinning, as in Restate): new
// code at a new URI takes over none of them, new code behind a registered URI (re-registered
// with force, or swapped in place) takes over those pinned to that deployment: those are
// checked. Only suspended ones are replayed (why: invoker/replay-check.ts); the others are counted.

import { KeelError } from '../errors/index.js';
import { MAX_SERVICE_PROTOCOL_VERSION } from '../protocol/versions.js';
import type { RegisterRequest } from '../metadata/types.js';
import type { JournalEntry } from '../storage/tables/journal.js';
import { replayAll, type ReplayCase, type ReplayVerdict } from '../invoker/replay-check.js';
import type { AdminContext } from './context.js';

export const DEFAULT_REPLAY_SAMPLE = 20;
/**
 * The most one check replays ("all" asks for this many): their statuses are copied into memory
 * first (~1.5 KB each), and replays start within REPLAY_BUDGET_MS; `suspended` in the report
 * says how many there were.
 */
export const MAX_REPLAY_SAMPLE = 10_000;
/** Replays in flight at once: the endpoint under test serves live traffic too, perhaps. */
const REPLAY_CONCURRENCY = 4;
/** A replay answers in milliseconds; one still silent after this long is `failed` (RT0001). */
const REPLAY_TIMEOUT_MS = 10_000;
/** Replays start within this long of the request, so that it is answered within a minute (the keel CLI waits 60 s). */
const REPLAY_BUDGET_MS = 40_000;

export interface ReplayReport {
  /**
   * The deployment as discovery found it (not registered by the check), and the registered one
   * at its URI whose invocations it would take over (none at a new URI: nothing to replay).
   */
  deployment: { uri: string; sdk_version?: string; services: string[]; replaces?: string };
  /** Suspended invocations of those services, and how many of them were replayed. */
  suspended: number;
  checked: number;
  compatible: number;
  mismatched: number;
  failed: number;
  /** Invocations of those services that were not replayed, by status: a replay could run their side effects again. */
  not_replayed: Record<string, number>;
  /** Whether every replay was compatible. */
  passed: boolean;
  invocations: ReplayVerdict[];
}

/** The check, for a registration request as POST /deployments takes it (the flags are ignored). */
export async function replayCheck(ctx: AdminContext, request: RegisterRequest, sample: number): Promise<ReplayReport> {
  const source = ctx.source();
  if (source.replayCandidates === undefined || ctx.endpoints === undefined) {
    throw new KeelError('KEEL0009', 'the replay check needs the partitions and the invoker of this server');
  }
  const started = Date.now();
  // Discovery only. At a registered URI (new code behind it, the usual case) the dry run keeps
  // that deployment's id; at a new one it makes a new id, to which nothing is pinned.
  const { created, deployment } = await ctx.registry.register({ ...request, force: true, breaking: true, dry_run: true });
  const replaces = created ? undefined : deployment.id;
  const handlers = new Map(deployment.services.map((s) => [s.name, new Set(s.handlers.map((h) => h.name))]));
  const found = replaces === undefined ? { sample: [], suspended: 0, other: {} } : await source.replayCandidates(new Set(handlers.keys()), replaces, sample);
  const { verdicts, byProtocol } = await replayCases(source, found, handlers, deployment);
  // What the attempts would log (a journal mismatch is an error of a real attempt) is the report here.
  const logger = ctx.logger.child({ component: 'replay-check' }, { level: 'silent' });
  for (const [protocol_version, group] of byProtocol) {
    const options = { deployment: attemptDeployment(deployment), protocol_version, endpoints: ctx.endpoints, timeout_ms: REPLAY_TIMEOUT_MS, message_size_limit_bytes: ctx.config.worker.invoker.message_size_limit_bytes, logger };
    verdicts.push(...(await replayAll(group, options, REPLAY_CONCURRENCY, started + REPLAY_BUDGET_MS)));
  }
  const report = summarise(deployment, [...handlers.keys()], replaces, found, verdicts);
  ctx.logger.info(
    { code: report.passed ? undefined : 'RT0016', uri: deployment.uri, checked: report.checked, mismatched: report.mismatched, failed: report.failed },
    `replay check of ${deployment.uri}: ${report.compatible} of ${report.checked} suspended invocations replay unchanged`,
  );
  return report;
}

type Source = ReturnType<AdminContext['source']>;
type Found = Awaited<ReturnType<NonNullable<Source['replayCandidates']>>>;
type Discovered = Awaited<ReturnType<AdminContext['registry']['register']>>['deployment'];

/**
 * The sampled invocations as replays to run, by the protocol version each started with, and the
 * verdicts of those that need no replay (a handler the new code lacks, a protocol it does not speak).
 */
async function replayCases(source: Source, found: Found, handlers: Map<string, Set<string>>, deployment: Discovered): Promise<{ verdicts: ReplayVerdict[]; byProtocol: Map<number, ReplayCase[]> }> {
  const verdicts: ReplayVerdict[] = [];
  const byProtocol = new Map<number, ReplayCase[]>();
  for (const status of found.sample) {
    const target = status.service_type === 'Service' ? `${status.service}/${status.handler}` : `${status.service}/${status.key}/${status.handler}`;
    if (!handlers.get(status.service)!.has(status.handler)) {
      verdicts.push({ id: status.id, target, verdict: 'mismatch', error_code: 'RT0018', message: `the deployment has no handler ${status.service}/${status.handler}, which the invocation runs` });
      continue;
    }
    const version = status.protocol_version ?? Math.min(deployment.max_protocol_version, MAX_SERVICE_PROTOCOL_VERSION);
    if (version < deployment.min_protocol_version || version > deployment.max_protocol_version) {
      verdicts.push({ id: status.id, target, verdict: 'failed', error_code: 'RT0014', message: `the invocation was started with protocol version ${version}; the deployment speaks ${deployment.min_protocol_version}–${deployment.max_protocol_version}` });
      continue;
    }
    const journal: JournalEntry[] = (await source.journalEntries(status.id)).map((e) => ({ type: e.type, payload: Buffer.from(e.payload.buffer, e.payload.byteOffset, e.payload.byteLength) }));
    // It moved on between the scan and now (resumed, or its journal was purged): counted, not replayed.
    if (journal.length !== status.journal_length) {
      found.other.changed = (found.other.changed ?? 0) + 1;
      continue;
    }
    const group = byProtocol.get(version);
    if (group === undefined) byProtocol.set(version, [{ status, journal }]);
    else group.push({ status, journal });
  }
  return { verdicts, byProtocol };
}

/** The deployment as an attempt addresses it. */
function attemptDeployment(deployment: Discovered) {
  return {
    id: deployment.id,
    uri: deployment.uri,
    use_http_11: deployment.use_http_11,
    additional_headers: deployment.additional_headers,
    protocol_type: deployment.protocol_type,
    ...(deployment.arn !== undefined ? { arn: deployment.arn } : {}),
    ...(deployment.assume_role_arn !== undefined ? { assume_role_arn: deployment.assume_role_arn } : {}),
  };
}

function summarise(deployment: Discovered, services: string[], replaces: string | undefined, found: Found, verdicts: ReplayVerdict[]): ReplayReport {
  const count = (v: ReplayVerdict['verdict']) => verdicts.filter((x) => x.verdict === v).length;
  return {
    deployment: {
      uri: deployment.uri,
      ...(deployment.sdk_version !== undefined ? { sdk_version: deployment.sdk_version } : {}),
      services,
      ...(replaces !== undefined ? { replaces } : {}),
    },
    suspended: found.suspended,
    checked: verdicts.length,
    compatible: count('compatible'),
    mismatched: count('mismatch'),
    failed: count('failed'),
    not_replayed: found.other,
    passed: verdicts.every((v) => v.verdict === 'compatible'),
    invocations: verdicts,
  };
}

/** The refusal of a registration whose replay check did not pass (KEEL1002). */
export function replayRefusal(report: ReplayReport): KeelError {
  let why = '';
  for (const v of report.invocations) {
    if (v.verdict === 'compatible') continue;
    why = `; first: ${v.id} (${v.target}): [${v.error_code}] ${v.message}`;
    break;
  }
  return new KeelError('KEEL1002', `the replay check of ${report.deployment.uri} did not pass: ${report.mismatched} of ${report.checked} suspended invocations mismatch, ${report.failed} failed${why}`);
}
