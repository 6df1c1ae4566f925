// Attempts running per deployment, for the deployments' concurrency limits (PUT
// /deployments/{id}/limits). One invoker counts its own (LocalSlots); partition threads
// (worker.threads > 1) each run an invoker, and a limit holds for the process, so they count in one
// table of shared memory (SharedSlots) and tell each other when a slot frees where others wait.
import { assert } from '../common/assert.js';

export interface DeploymentSlots {
  /** Takes a slot of `deployment` unless `cap` attempts run there already (no cap: always). */
  take(deployment: string, cap: number | undefined): boolean;
  /** Gives back a slot that `take` gave. */
  give(deployment: string): void;
  /** Whether `cap` attempts run against `deployment` now (a take would be refused). */
  full(deployment: string, cap: number | undefined): boolean;
  /** Attempts of this invoker now wait for a slot of `deployment` (`delta` > 0) or no longer (< 0). */
  waiting(deployment: string, delta: number): void;
}

export class LocalSlots implements DeploymentSlots {
  private readonly running = new Map<string, number>();

  take(deployment: string, cap: number | undefined): boolean {
    const n = this.running.get(deployment) ?? 0;
    if (cap !== undefined && n >= cap) return false;
    this.running.set(deployment, n + 1);
    return true;
  }

  give(deployment: string): void {
    const n = this.running.get(deployment) ?? 0;
    assert(n > 0, () => `a slot of ${deployment} given back that was not taken`);
    if (n === 1) this.running.delete(deployment);
    else this.running.set(deployment, n - 1);
  }

  full(deployment: string, cap: number | undefined): boolean {
    return cap !== undefined && (this.running.get(deployment) ?? 0) >= cap;
  }

  waiting(): void {}
}

/** Entries of the shared table: deployments a process has run attempts of (never removed). */
export const SHARED_SLOTS_ENTRIES = 16_384;
const WORDS = 4; // key (two hashes), running, waiting
const KEY_A = 0;
const KEY_B = 1;
const RUNNING = 2;
const WAITING = 3;

/** The memory SharedSlots of every thread share: made once by the main thread. */
export function sharedSlotsMemory(): SharedArrayBuffer {
  return new SharedArrayBuffer(SHARED_SLOTS_ENTRIES * WORDS * Int32Array.BYTES_PER_ELEMENT);
}

/** Two independent 32-bit hashes of a deployment id, neither 0 (0 marks a free entry). */
function keyOf(id: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 5381;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = (Math.imul(b, 33) + c) | 0;
  }
  return [a | 1, b | 1];
}

/**
 * An open-addressing table in shared memory: a deployment's entry is found by its two hashes
 * (a collision of both is one in 2^62), claimed with a compare-and-exchange, and its counts
 * changed with atomics, so that no two threads take the last slot.
 */
export class SharedSlots implements DeploymentSlots {
  private readonly cells: Int32Array;
  private readonly index = new Map<string, number>();

  constructor(
    memory: SharedArrayBuffer,
    /** A slot of `deployment` freed while attempts wait for one somewhere: tell the other threads. */
    private readonly freed: (deployment: string) => void,
  ) {
    this.cells = new Int32Array(memory);
    assert(this.cells.length === SHARED_SLOTS_ENTRIES * WORDS, () => `shared slots of ${this.cells.length} words`);
  }

  take(deployment: string, cap: number | undefined): boolean {
    const at = this.entry(deployment) + RUNNING;
    for (;;) {
      const n = Atomics.load(this.cells, at);
      if (cap !== undefined && n >= cap) return false;
      if (Atomics.compareExchange(this.cells, at, n, n + 1) === n) return true;
    }
  }

  give(deployment: string): void {
    const e = this.entry(deployment);
    const before = Atomics.sub(this.cells, e + RUNNING, 1);
    assert(before > 0, () => `a slot of ${deployment} given back that was not taken`);
    if (Atomics.load(this.cells, e + WAITING) > 0) this.freed(deployment);
  }

  full(deployment: string, cap: number | undefined): boolean {
    return cap !== undefined && Atomics.load(this.cells, this.entry(deployment) + RUNNING) >= cap;
  }

  waiting(deployment: string, delta: number): void {
    const before = Atomics.add(this.cells, this.entry(deployment) + WAITING, delta);
    assert(before + delta >= 0, () => `${before + delta} attempts wait for ${deployment}`);
  }

  /** The word index of the deployment's entry, claimed on its first use. */
  private entry(deployment: string): number {
    const known = this.index.get(deployment);
    if (known !== undefined) return known;
    const [a, b] = keyOf(deployment);
    for (let probe = 0, i = (a >>> 0) % SHARED_SLOTS_ENTRIES; probe < SHARED_SLOTS_ENTRIES; probe++, i = (i + 1) % SHARED_SLOTS_ENTRIES) {
      const at = i * WORDS;
      let ka = Atomics.load(this.cells, at + KEY_A);
      if (ka === 0) ka = Atomics.compareExchange(this.cells, at + KEY_A, 0, a) === 0 ? a : Atomics.load(this.cells, at + KEY_A);
      if (ka !== a) continue;
      // Whoever sets the second hash owns the entry (two ids whose first hashes meet race only here).
      let kb = Atomics.compareExchange(this.cells, at + KEY_B, 0, b);
      if (kb === 0) kb = b;
      if (kb !== b) continue;
      this.index.set(deployment, at);
      return at;
    }
    throw new Error(`more than ${SHARED_SLOTS_ENTRIES} deployments counted in one process`);
  }
}
