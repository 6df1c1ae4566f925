import type { RetryPolicy } from '../config/index.js';
import { Then } from '../log/commands.js';

export interface RetryDecision {
  then: number;
  retry_at_ms: number;
}

/**
 * What to do after the `failed_attempts`-th failed attempt (1 for the first failure):
 * retry after an exponential backoff, or, once the attempts are used up, pause or fail.
 */
export function decideRetry(policy: RetryPolicy, failed_attempts: number, now_ms: number, override_delay_ms?: number): RetryDecision {
  if (policy.max_attempts !== undefined && failed_attempts >= policy.max_attempts) {
    return { then: policy.on_max_attempts === 'kill' ? Then.FAIL : Then.PAUSE, retry_at_ms: 0 };
  }
  return { then: Then.RETRY, retry_at_ms: now_ms + (override_delay_ms ?? backoff_ms(policy, failed_attempts)) };
}

/** Delay before the attempt after the `failed_attempts`-th failure. */
export function backoff_ms(policy: RetryPolicy, failed_attempts: number): number {
  const exp = policy.initial_interval_ms * policy.exponentiation_factor ** Math.max(0, failed_attempts - 1);
  return Math.min(Math.round(exp), policy.max_interval_ms);
}

/**
 * An endpoint's Retry-After wait is at most this long: a misconfigured endpoint must not park
 * invocations for days (kill or resume them from the admin API to act sooner).
 */
export const MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * The endpoint said when to come back (Retry-After of a 429 or 503): retry then, without
 * counting the attempt against max_attempts, as Restate does. Never sooner than the policy's
 * initial interval: `Retry-After: 0` on every answer must not spin.
 */
export function retryAfter(policy: RetryPolicy, retry_after_ms: number, now_ms: number): RetryDecision {
  const wait_ms = Math.min(Math.max(retry_after_ms, policy.initial_interval_ms), MAX_RETRY_AFTER_MS);
  return { then: Then.RETRY, retry_at_ms: now_ms + wait_ms };
}
