// Invariants, asserted on both sides of a boundary (TigerBeetle's TIGER_STYLE): a broken one is
// a bug, and the code that finds it stops rather than continue on state it cannot trust.

/** A broken invariant. Whoever catches it must stop the work it was part of, not carry on. */
export class InvariantError extends Error {
  override readonly name = 'InvariantError';
}

export function assert(condition: unknown, message: string | (() => string)): asserts condition {
  if (!condition) throw new InvariantError(typeof message === 'function' ? message() : message);
}

/** The end of an exhaustive switch: a value the types say cannot exist. */
export function assertNever(value: never, what: string): never {
  throw new InvariantError(`unexpected ${what}: ${JSON.stringify(value)}`);
}
