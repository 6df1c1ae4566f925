import { createHash } from 'node:crypto';

/**
 * The `version` of `restate state patch|clear`: base64url (no padding) of SHA-256 over the
 * state sorted by key, each entry hashed as u64_be(index) 0x01 key 0x02 value 0x03.
 */
export function stateVersion(entries: Iterable<[string, Buffer]>): string {
  const sorted = [...entries].sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const h = createHash('sha256');
  sorted.forEach(([k, v], i) => {
    const idx = Buffer.alloc(8);
    idx.writeBigUInt64BE(BigInt(i));
    h.update(idx).update(Buffer.from([1])).update(k).update(Buffer.from([2])).update(v).update(Buffer.from([3]));
  });
  return h.digest('base64url');
}
