// Bounds on what an ingress request may carry, beyond the HTTP edge's (`edge.ts`): every value
// that is stored (keys, idempotency keys, execution times) is bounded before it reaches a log.

/** Service, handler and workflow names: what discovery accepts is far shorter. */
export const MAX_NAME_CHARS = 1024;
/** An object or workflow key, decoded. */
export const MAX_KEY_CHARS = 4096;
/** The `idempotency-key` header. */
export const MAX_IDEMPOTENCY_KEY_CHARS = 4096;
/** `?delay=`: longer is a mistake, not a schedule (and stays far inside what dates can hold). */
export const MAX_DELAY_MS = 10 * 365 * 86_400_000;
/** The text of `?delay=` itself. */
export const MAX_DELAY_TEXT_CHARS = 64;
