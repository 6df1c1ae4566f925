import { createHash, randomBytes } from 'node:crypto';

// Restate-compatible resource ids. An invocation id is a 64-bit partition key plus a 128-bit
// random part; its text form is `inv_1` + base62(bswap64(pk), 11) + base62(bswap128(uuid), 22),
// which is what the restate CLI decodes client-side.

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const INDEX = new Map([...ALPHABET].map((c, i) => [c, BigInt(i)]));

function base62(value: bigint, width: number): string {
  let out = '';
  let v = value;
  while (v > 0n) {
    out = ALPHABET[Number(v % 62n)] + out;
    v /= 62n;
  }
  if (out.length > width) throw new Error('base62 overflow');
  return out.padStart(width, '0');
}

function unbase62(text: string): bigint | undefined {
  let v = 0n;
  for (const c of text) {
    const d = INDEX.get(c);
    if (d === undefined) return undefined;
    v = v * 62n + d;
  }
  return v;
}

/** Reads `bytes` as a big-endian unsigned integer. */
function readBE(bytes: Uint8Array): bigint {
  let v = 0n;
  for (const b of bytes) v = (v << 8n) | BigInt(b);
  return v;
}

function writeBE(value: bigint, size: number): Buffer {
  const out = Buffer.alloc(size);
  let v = value;
  for (let i = size - 1; i >= 0; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}

/** The little-endian reading of the same bytes: what bswap of the big-endian value gives. */
function readLE(bytes: Uint8Array): bigint {
  return readBE(Uint8Array.from(bytes).reverse());
}

export const INVOCATION_ID_BYTES = 24;

// The base62 conversions cost microseconds of BigInt arithmetic, and every journal entry of an
// invocation converts its id: recently seen ids are remembered (both ways), up to a bound.
const MEMO_LIMIT = 65_536;
const byBytes = new Map<string, InvocationId>();
const byText = new Map<string, InvocationId>();

function remember(id: InvocationId): InvocationId {
  if (byText.size >= MEMO_LIMIT) {
    byText.clear();
    byBytes.clear();
  }
  byText.set(id.text, id);
  byBytes.set(id.bytes.toString('latin1'), id);
  return id;
}

/** An invocation id: 8 bytes partition key (big-endian) then 16 random bytes. */
export class InvocationId {
  private constructor(readonly bytes: Buffer, readonly text: string) {}

  static fromParts(partitionKey: bigint, uuid: Buffer): InvocationId {
    if (uuid.length !== 16) throw new Error('invocation uuid must be 16 bytes');
    const bytes = Buffer.concat([writeBE(partitionKey, 8), uuid]);
    return new InvocationId(bytes, encodeInvocationId(bytes));
  }

  static random(partitionKey: bigint): InvocationId {
    return InvocationId.fromParts(partitionKey, randomBytes(16));
  }

  static fromBytes(bytes: Uint8Array): InvocationId | undefined {
    if (bytes.length !== INVOCATION_ID_BYTES) return undefined;
    const b = Buffer.from(bytes);
    const key = b.toString('latin1');
    const known = byBytes.get(key);
    if (known !== undefined) return known;
    return remember(new InvocationId(b, encodeInvocationId(b)));
  }

  static parse(text: string): InvocationId | undefined {
    const known = byText.get(text);
    if (known !== undefined) return known;
    const m = /^inv_1([0-9a-zA-Z]{11})([0-9a-zA-Z]{22})$/.exec(text);
    if (!m) return undefined;
    const pk = unbase62(m[1]!);
    const uuid = unbase62(m[2]!);
    if (pk === undefined || uuid === undefined || pk >= 1n << 64n || uuid >= 1n << 128n) return undefined;
    // The text holds the byte-swapped values: write them little-endian to get the original bytes.
    const bytes = Buffer.concat([writeBE(pk, 8).reverse(), writeBE(uuid, 16).reverse()]);
    return remember(new InvocationId(bytes, text));
  }

  get partitionKey(): bigint {
    return readBE(this.bytes.subarray(0, 8));
  }

  toString(): string {
    return this.text;
  }
}

function encodeInvocationId(bytes: Buffer): string {
  return `inv_1${base62(readLE(bytes.subarray(0, 8)), 11)}${base62(readLE(bytes.subarray(8, 24)), 22)}`;
}

/** Deployment ids: `dp_1` + 22 base62 characters of a random 128-bit value. */
export function newDeploymentId(): string {
  return `dp_1${base62(readBE(randomBytes(16)), 22)}`;
}

export function isDeploymentId(text: string): boolean {
  const m = /^dp_1([0-9a-zA-Z]{22})$/.exec(text);
  if (!m) return false;
  const v = unbase62(m[1]!);
  return v !== undefined && v < 1n << 128n;
}

/** 64-bit partition key of a string (object key, workflow id, idempotency key). */
export function partitionKeyOf(text: string): bigint {
  return readBE(createHash('sha256').update(text).digest().subarray(0, 8));
}

export function randomPartitionKey(): bigint {
  return readBE(randomBytes(8));
}

/** Deterministic 128-bit uuid from the parts, for workflow and idempotent invocation ids. */
export function deterministicUuid(...parts: string[]): Buffer {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest().subarray(0, 16);
}

/**
 * Awakeable ids (made by the SDK) carry the invocation id bytes and a signal index, base64url:
 * `sign_1…` since protocol v5, `prom_1…` before.
 */
export function decodeAwakeableId(text: string): { invocation: InvocationId; signalIndex: number } | undefined {
  const m = /^(sign|prom)_1([A-Za-z0-9_-]+)$/.exec(text);
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

/** A workflow's run invocation: one per (workflow, key), so the id is derived from them. */
export function workflowInvocationId(service: string, key: string): InvocationId {
  return InvocationId.fromParts(objectPartitionKey(service, key), deterministicUuid('workflow', service, key));
}

/** An invocation with an idempotency key: repeats of the same request map to the same id. */
export function idempotentInvocationId(service: string, key: string, handler: string, idempotencyKey: string): InvocationId {
  const pk = key ? objectPartitionKey(service, key) : partitionKeyOf(`${service}/${handler}/${idempotencyKey}`);
  return InvocationId.fromParts(pk, deterministicUuid('idempotent', service, key, handler, idempotencyKey));
}
