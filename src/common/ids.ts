import { createHash, hash, randomBytes } from 'node:crypto';
import { assert } from './assert.js';

// Restate-compatible resource ids. An invocation id is a 64-bit partition key plus a 128-bit
// random part; its text form is `inv_1` + base62(bswap64(pk), 11) + base62(bswap128(uuid), 22),
// which is what the restate CLI decodes client-side.

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const DIGIT = new Map([...ALPHABET].map((c, i) => [c, i]));

/**
 * base62 of the unsigned integer that `bytes` hold (big-endian, or little-endian when `le`),
 * `width` digits. Long division in plain numbers: the value as 16-bit limbs, divided by 62^5
 * per pass (a remainder below 62^5 times 2^16 stays exact in a double), five digits a pass.
 * Every new invocation names itself this way: BigInt cost ~6 µs an id, division on bytes ~5 µs.
 */
const LIMB = 65_536;
const DIGITS_PER_PASS = 5;
const PASS_DIVISOR = 62 ** DIGITS_PER_PASS;
const limbs = new Array<number>(16).fill(0);
function base62Bytes(bytes: Uint8Array, le: boolean, width: number): string {
  const n = bytes.length;
  assert(n % 2 === 0 && n <= 2 * limbs.length, () => `base62 of ${n} bytes`);
  const count = n >> 1;
  for (let i = 0; i < count; i++) {
    const hi = le ? bytes[n - 1 - 2 * i]! : bytes[2 * i]!;
    const lo = le ? bytes[n - 2 - 2 * i]! : bytes[2 * i + 1]!;
    limbs[i] = hi * 256 + lo;
  }
  const out = new Array<string>(width);
  let d = width - 1;
  let rem = 0;
  while (d >= 0) {
    rem = 0;
    for (let j = 0; j < count; j++) {
      const cur = rem * LIMB + limbs[j]!;
      const q = Math.floor(cur / PASS_DIVISOR);
      limbs[j] = q;
      rem = cur - q * PASS_DIVISOR;
    }
    for (let k = 0; k < DIGITS_PER_PASS && d >= 0; k++) {
      const digit = rem % 62;
      out[d--] = ALPHABET[digit]!;
      rem = (rem - digit) / 62;
    }
  }
  for (let j = 0; j < count; j++) if (limbs[j] !== 0) rem = 1;
  if (rem !== 0) throw new Error('base62 overflow');
  return out.join('');
}

/** Random bytes from a pool refilled 4 KiB at a time: one call into the CSPRNG per ~170 ids. */
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let poolAt = 0;
function randomPooled(n: number): Buffer {
  if (poolAt + n > pool.length) {
    pool = randomBytes(POOL_BYTES);
    poolAt = 0;
  }
  const out = pool.subarray(poolAt, poolAt + n);
  poolAt += n;
  return out;
}

/**
 * The `size` bytes (big-endian) of the base62 number `text`, or undefined for a character outside
 * the alphabet or a value that does not fit. Multiply-and-add on base-256 digits in plain numbers,
 * the inverse of `base62Bytes`: BigInt cost ~40 µs an id before it was optimised, which a restart
 * re-arming every sleeping invocation's timer paid once per id.
 */
function unbase62(text: string, size: number): Buffer | undefined {
  const out = Buffer.alloc(size);
  for (const c of text) {
    let carry = DIGIT.get(c);
    if (carry === undefined) return undefined;
    for (let i = size - 1; i >= 0; i--) {
      const cur: number = out[i]! * 62 + carry;
      out[i] = cur & 0xff;
      carry = cur >>> 8;
    }
    if (carry !== 0) return undefined;
  }
  return out;
}


export const INVOCATION_ID_BYTES = 24;
/** Where a new id's uuid holds the clock: its last six bytes, the most significant in the text. */
const TIME_AT = 10;

// Every journal entry's command names its invocation, by bytes or by text: recently seen ids are
// remembered both ways. By bytes, through 48 bits of the uuid (random, or a sha256 for derived
// ids) with the bytes compared on a hit: a key string of the bytes cost more to make and hash
// than the conversion it saved.
//
// Two generations of MEMO_GENERATION ids each: a full one becomes the old one and the old one is
// dropped. An id is looked up again within milliseconds of its making (the fold decodes the
// command the ingress encoded, the invoker's and the journal's commands follow), so a small memo
// hits as often as a large one; one of 65,536 ids cost ~3 µs per new id in the server (two
// inserts into cache-cold tables of 1.5 MB), this one ~1 µs less in isolation.
const MEMO_GENERATION = 4_096;
class IdMemo<K> {
  private current = new Map<K, InvocationId>();
  private previous = new Map<K, InvocationId>();

  get(key: K): InvocationId | undefined {
    return this.current.get(key) ?? this.previous.get(key);
  }

  set(key: K, id: InvocationId): void {
    if (this.current.size >= MEMO_GENERATION) {
      this.previous = this.current;
      this.current = new Map();
    }
    this.current.set(key, id);
  }
}
const byBytes = new IdMemo<number>();
const byText = new IdMemo<string>();
const bytesKey = (bytes: Uint8Array): number => bytes[8]! * 2 ** 40 + bytes[9]! * 2 ** 32 + ((bytes[10]! << 24) >>> 0) + (bytes[11]! << 16) + (bytes[12]! << 8) + bytes[13]!;

// An id outlives the request that made it (the memo above, caches, maps of work in flight): a
// 24-byte slice of Node's shared Buffer pool would keep that pool's whole 8 KiB slab alive, and
// the memo alone then held hundreds of MB of slabs under load. Ids take slices of their own slabs.
const ID_SLAB_IDS = 64;
let idSlab = Buffer.allocUnsafeSlow(INVOCATION_ID_BYTES * ID_SLAB_IDS);
let idSlabAt = 0;

function idBytes(): Buffer {
  if (idSlabAt === idSlab.length) {
    idSlab = Buffer.allocUnsafeSlow(INVOCATION_ID_BYTES * ID_SLAB_IDS);
    idSlabAt = 0;
  }
  const out = idSlab.subarray(idSlabAt, idSlabAt + INVOCATION_ID_BYTES);
  idSlabAt += INVOCATION_ID_BYTES;
  return out;
}

function remember(id: InvocationId): InvocationId {
  byText.set(id.text, id);
  byBytes.set(bytesKey(id.bytes), id);
  return id;
}

/** An invocation id: 8 bytes partition key (big-endian) then 16 random bytes. */
export class InvocationId {
  private constructor(readonly bytes: Buffer, readonly text: string) {}

  static fromParts(partitionKey: bigint, uuid: Uint8Array): InvocationId {
    if (uuid.length !== 16) throw new Error('invocation uuid must be 16 bytes');
    const bytes = idBytes();
    bytes.writeBigUInt64BE(partitionKey, 0);
    bytes.set(uuid, 8);
    return remember(new InvocationId(bytes, encodeInvocationId(bytes)));
  }

  /**
   * A new id: its uuid's ten low bytes random (80 bits), its six high ones the clock in
   * milliseconds. The text carries the uuid byte-swapped, so its leading digits are the clock and
   * the ids made in the same minute share them: the store keys rows by them (storage/keys.ts's
   * `idKeyText`). Restate's uuids carry their time the same way (ULIDs).
   */
  static random(partitionKey: bigint, now_ms = Date.now()): InvocationId {
    assert(Number.isSafeInteger(now_ms) && now_ms >= 0 && now_ms < 2 ** 48, () => `clock ${now_ms} outside 48 bits`);
    const uuid = Buffer.allocUnsafe(16);
    randomPooled(TIME_AT).copy(uuid, 0);
    uuid.writeUIntLE(now_ms, TIME_AT, 16 - TIME_AT);
    return InvocationId.fromParts(partitionKey, uuid);
  }

  static fromBytes(bytes: Uint8Array): InvocationId | undefined {
    if (bytes.length !== INVOCATION_ID_BYTES) return undefined;
    const known = byBytes.get(bytesKey(bytes));
    if (known !== undefined && known.bytes.equals(bytes)) return known;
    const b = idBytes();
    b.set(bytes);
    return remember(new InvocationId(b, encodeInvocationId(b)));
  }

  static parse(text: string): InvocationId | undefined {
    const known = byText.get(text);
    if (known !== undefined) return known;
    const m = /^inv_1([0-9a-zA-Z]{11})([0-9a-zA-Z]{22})$/.exec(text);
    if (!m) return undefined;
    const pk = unbase62(m[1]!, 8);
    const uuid = unbase62(m[2]!, 16);
    if (pk === undefined || uuid === undefined) return undefined;
    // The text holds the byte-swapped values: reversed, they are the original bytes.
    const bytes = idBytes();
    bytes.set(pk.reverse(), 0);
    bytes.set(uuid.reverse(), 8);
    return remember(new InvocationId(bytes, text));
  }

  get partitionKey(): bigint {
    return this.bytes.readBigUInt64BE(0);
  }

  toString(): string {
    return this.text;
  }
}

function encodeInvocationId(bytes: Buffer): string {
  return `inv_1${base62Bytes(bytes.subarray(0, 8), true, 11)}${base62Bytes(bytes.subarray(8, 24), true, 22)}`;
}

/** The partition key of an invocation id's bytes, without making the id. */
export function partitionKeyOfIdBytes(bytes: Uint8Array): bigint | undefined {
  if (bytes.length !== INVOCATION_ID_BYTES) return undefined;
  return Buffer.from(bytes.buffer, bytes.byteOffset, 8).readBigUInt64BE(0);
}

/** Deployment ids: `dp_1` + 22 base62 characters of a random 128-bit value. */
export function newDeploymentId(): string {
  return `dp_1${base62Bytes(randomBytes(16), false, 22)}`;
}

export function isDeploymentId(text: string): boolean {
  const m = /^dp_1([0-9a-zA-Z]{22})$/.exec(text);
  if (!m) return false;
  return unbase62(m[1]!, 16) !== undefined;
}

/** 64-bit partition key of a string (object key, workflow id, idempotency key). */
export function partitionKeyOf(text: string): bigint {
  return sha256(text).readBigUInt64BE(0);
}

export function randomPartitionKey(): bigint {
  return randomPooled(8).readBigUInt64BE(0);
}

/** The partition (of `partitions`) that owns a partition key: ⌊key · partitions / 2⁶⁴⌋, contiguous ranges of keys. */
export function partitionIndexOf(partitionKey: bigint, partitions: number): number {
  return Number((partitionKey * BigInt(partitions)) >> 64n);
}

/** A random partition key of partition `p` of `partitions`: from ⌈p·2⁶⁴/P⌉ up to ⌈(p+1)·2⁶⁴/P⌉ (the inverse of ⌊key·P/2⁶⁴⌋). */
export function randomKeyOfPartition(p: number, partitions: number): bigint {
  const count = BigInt(partitions);
  const lo = ((BigInt(p) << 64n) + count - 1n) / count;
  const hi = ((BigInt(p + 1) << 64n) + count - 1n) / count;
  return lo + (randomPartitionKey() % (hi - lo));
}

/** Deterministic 128-bit uuid from the parts, for workflow and idempotent invocation ids. */
export function deterministicUuid(...parts: string[]): Buffer {
  return sha256(parts.map((p) => `${p}\0`).join('')).subarray(0, 16);
}

/**
 * crypto.hash (one shot, Node >= 20.12) takes half the time of a Hash object (~2 µs less here),
 * and an object call hashes its key at the ingress.
 */
function sha256(text: string): Buffer {
  return typeof hash === 'function' ? (hash('sha256', text, 'buffer') as Buffer) : createHash('sha256').update(text).digest();
}

/**
 * Awakeable ids (made by the SDK) carry the invocation id bytes and a signal index, base64url:
 * `sign_1…` since protocol v5, `prom_1…` before.
 */
export function decodeAwakeableId(text: string): { invocation: InvocationId; signalIndex: number } | undefined {
  // With or without base64 padding: the Java SDK pads its ids, the others do not (Restate takes both).
  const m = /^(sign|prom)_1([A-Za-z0-9_-]+)={0,2}$/.exec(text);
  if (!m) return undefined;
  const raw = Buffer.from(m[2]!, 'base64url');
  if (raw.length !== INVOCATION_ID_BYTES + 4) return undefined;
  const invocation = InvocationId.fromBytes(raw.subarray(0, INVOCATION_ID_BYTES));
  if (!invocation) return undefined;
  return { invocation, signalIndex: raw.readUInt32BE(INVOCATION_ID_BYTES) };
}

/** Partition key of a virtual object or workflow instance: all its invocations share it. */
export function objectPartitionKey(service: string, key: string): bigint {
  return partitionKeyOf(`${service}/${key}`);
}

/** A workflow's run invocation: one per (scope, workflow, key), so the id is derived from them. */
export function workflowInvocationId(service: string, key: string, scope?: string): InvocationId {
  if (scope !== undefined) return InvocationId.fromParts(scopePartitionKey(scope), deterministicUuid('workflow', service, key, 'scope', scope));
  return InvocationId.fromParts(objectPartitionKey(service, key), deterministicUuid('workflow', service, key));
}

/**
 * An invocation with an idempotency key: repeats of the same request map to the same id. In a
 * scope the key is the scope's (the same key in two scopes names two invocations), and the
 * invocation lives on the scope's partition; unscoped ids are as before scopes existed.
 */
export function idempotentInvocationId(service: string, key: string, handler: string, idempotencyKey: string, scope?: string): InvocationId {
  if (scope !== undefined) return InvocationId.fromParts(scopePartitionKey(scope), deterministicUuid('idempotent', service, key, handler, idempotencyKey, 'scope', scope));
  const pk = key ? objectPartitionKey(service, key) : partitionKeyOf(`${service}/${handler}/${idempotencyKey}`);
  return InvocationId.fromParts(pk, deterministicUuid('idempotent', service, key, handler, idempotencyKey));
}

/**
 * Partition key of a flow-control scope: every invocation of a scope lands on one partition,
 * where the scope's concurrency counters and queues live, so its limits hold without
 * coordination between partitions. (`/` cannot occur in a scope: no object key collides.)
 */
export function scopePartitionKey(scope: string): bigint {
  return partitionKeyOf(`scope/${scope}/`);
}

/**
 * A schedule's id (Keel's own schedules): an invocation id of the partition the schedule lives
 * in, never one of an invocation. Its timer and the results of its firings are addressed to it.
 */
export function scheduleId(name: string): InvocationId {
  return InvocationId.fromParts(partitionKeyOf(`schedule/${name}`), deterministicUuid('schedule', name));
}
