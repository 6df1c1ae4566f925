// Which invocation ids the query engine's copy may hold among its older rows (engine-main.ts): a
// Bloom filter, so that a change to an invocation that cannot be there costs no scan of the copy.
// A false "maybe" costs one scan; a false "no" would leave a status in the copy twice: none.

import { assert } from '../../common/assert.js';

/** Bits per id: ~1% false positives with 7 hashes. */
const BITS_PER_ID = 10;
const HASHES = 7;
/** The most ids one filter is sized for (12.5 MB of bits); past it the false positives rise. */
export const MAX_FILTER_IDS = 10_000_000;

export class IdFilter {
  private readonly bits: Uint8Array;
  private readonly size: number;
  private count = 0;
  /** The ids its bits are sized for: `capacity`, within [1,024, MAX_FILTER_IDS]. */
  readonly sizedFor: number;

  /** A filter for `capacity` ids (at least 1,024, at most MAX_FILTER_IDS). */
  constructor(readonly capacity: number) {
    assert(Number.isInteger(capacity) && capacity > 0, () => `an id filter for ${capacity} ids`);
    this.sizedFor = Math.min(MAX_FILTER_IDS, Math.max(1024, capacity));
    this.size = this.sizedFor * BITS_PER_ID;
    this.bits = new Uint8Array(Math.ceil(this.size / 8));
  }

  /** Ids added so far, counting an id added twice twice (past `sizedFor` it answers "maybe" more often). */
  get added(): number {
    return this.count;
  }

  add(id: string): void {
    const [h1, h2] = hashes(id);
    for (let i = 0; i < HASHES; i++) {
      const bit = (h1 + i * h2) % this.size;
      this.bits[bit >>> 3]! |= 1 << (bit & 7);
    }
    this.count += 1;
  }

  /** False: `id` was never added. True: it may have been. */
  mayHave(id: string): boolean {
    const [h1, h2] = hashes(id);
    for (let i = 0; i < HASHES; i++) {
      const bit = (h1 + i * h2) % this.size;
      if ((this.bits[bit >>> 3]! & (1 << (bit & 7))) === 0) return false;
    }
    return true;
  }
}

/** Two independent 32-bit FNV-1a hashes of the UTF-16 code units (double hashing gives the rest). */
function hashes(text: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  // Both unsigned (a `| 1` after `>>> 0` would make h2 negative, and so the probes), h2 odd.
  return [a >>> 0, (b | 1) >>> 0];
}
