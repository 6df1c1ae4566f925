/**
 * A copy of `bytes` in memory of its own, for bytes kept past the request that brought them (a
 * journal, a cache). A view of a message keeps the whole message alive, and `Buffer.from` of
 * fewer than 4 KiB is a slice of Node's shared 8 KiB pool that keeps the whole slab alive: one
 * long-lived slice per slab, and a cache that counts 16 bytes holds 8 KiB.
 */
export function ownCopy(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafeSlow(bytes.length);
  out.set(bytes);
  return out;
}
