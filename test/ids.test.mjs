// Invocation ids: the text form is what Restate makes (the restate CLI decodes it client-side),
// checked against a reference written with BigInt, for random ids and the edge values.
import t from 'tap';
import { collectedArrayBuffers } from './helpers/memory.mjs';
import { createHash, randomBytes } from 'node:crypto';
import { InvocationId, deterministicUuid, partitionKeyOf, partitionKeyOfIdBytes, randomPartitionKey, isDeploymentId, newDeploymentId, workflowInvocationId } from '../dist/common/ids.js';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
function refBase62(value, width) {
  let out = '';
  for (let v = value; v > 0n; v /= 62n) out = ALPHABET[Number(v % 62n)] + out;
  return out.padStart(width, '0');
}
const le = (bytes) => [...bytes].reverse().reduce((v, b) => (v << 8n) | BigInt(b), 0n);
const reference = (bytes) => `inv_1${refBase62(le(bytes.subarray(0, 8)), 11)}${refBase62(le(bytes.subarray(8, 24)), 22)}`;

t.test('the text form matches the reference, and parses back to the same bytes', async (t) => {
  const edges = [Buffer.alloc(24, 0), Buffer.alloc(24, 0xff), Buffer.from([...Array(24).keys()])];
  const samples = [...edges, ...Array.from({ length: 2000 }, () => randomBytes(24))];
  let same = 0;
  for (const bytes of samples) {
    const id = InvocationId.fromBytes(bytes);
    if (id.text === reference(bytes) && InvocationId.parse(id.text).bytes.equals(bytes) && id.partitionKey === bytes.readBigUInt64BE(0)) same++;
  }
  t.equal(same, samples.length);
});

t.test('random ids and partition keys', async (t) => {
  const ids = Array.from({ length: 1000 }, () => InvocationId.random(randomPartitionKey()));
  t.equal(new Set(ids.map((i) => i.text)).size, 1000, 'distinct');
  t.ok(ids.every((i) => partitionKeyOfIdBytes(i.bytes) === i.partitionKey && /^inv_1[0-9a-zA-Z]{33}$/.test(i.text)));
  t.equal(partitionKeyOfIdBytes(Buffer.alloc(3)), undefined);
  t.ok(isDeploymentId(newDeploymentId()));
});

t.test('parsing text never seen before (not from the memo): the bytes, and values too large refused', async (t) => {
  const samples = [Buffer.alloc(24, 0xff), Buffer.alloc(24, 0), ...Array.from({ length: 2000 }, () => randomBytes(24))];
  let same = 0;
  for (const bytes of samples) if (InvocationId.parse(reference(bytes))?.bytes.equals(bytes)) same++;
  t.equal(same, samples.length);
  // 11 base62 digits reach past 2^64 and 22 past 2^128.
  t.equal(InvocationId.parse(`inv_1${'Z'.repeat(11)}${'0'.repeat(22)}`), undefined, 'partition key past 64 bits');
  t.equal(InvocationId.parse(`inv_1${'0'.repeat(11)}${'Z'.repeat(22)}`), undefined, 'uuid past 128 bits');
  t.equal(InvocationId.parse(`inv_1${refBase62((1n << 64n) - 1n, 11)}${refBase62((1n << 128n) - 1n, 22)}`)?.bytes.equals(Buffer.alloc(24, 0xff)), true, 'the largest values fit');
  t.equal(InvocationId.parse(`inv_1${refBase62(1n << 64n, 11)}${'0'.repeat(22)}`), undefined, '2^64 does not');
  t.equal(isDeploymentId(`dp_1${'Z'.repeat(22)}`), false);
  t.equal(isDeploymentId(`dp_1${refBase62((1n << 128n) - 1n, 22)}`), true);
});

t.test('ids remembered by bytes: two ids that share the bytes the memo is keyed by stay apart', async (t) => {
  const a = randomBytes(24);
  const b = Buffer.from(a);
  b[0] ^= 0xff; // another partition key
  b[20] ^= 0x01; // and another tail of the uuid, with bytes 8..13 the same
  const first = InvocationId.fromBytes(a);
  const second = InvocationId.fromBytes(b);
  t.equal(first.text, reference(a));
  t.equal(second.text, reference(b));
  t.equal(InvocationId.fromBytes(a).text, reference(a), 'the first again, after the second took its memo slot');
  t.ok(InvocationId.fromBytes(Uint8Array.from(b)).bytes.equals(b), 'a Uint8Array view finds the same id');
});

t.test('the memo of recent ids keeps the last 4,096 to 8,192 and no more', async (t) => {
  const first = InvocationId.random(randomPartitionKey());
  const made = Array.from({ length: 10_000 }, () => InvocationId.random(randomPartitionKey()));
  t.equal(InvocationId.fromBytes(Buffer.from(made[made.length - 4_000].bytes)), made[made.length - 4_000], 'an id 4,000 back is the one made, by bytes');
  t.equal(InvocationId.parse(made[made.length - 4_000].text), made[made.length - 4_000], 'and by text');
  const again = InvocationId.fromBytes(Buffer.from(first.bytes));
  t.not(again, first, 'an id 10,000 back is made anew: the memo let it go');
  t.equal(again.text, first.text, 'the same id all the same');
});

t.test('awakeable ids decode with or without base64 padding (the Java SDK pads them)', async (t) => {
  const { decodeAwakeableId } = await import('../dist/common/ids.js');
  const id = InvocationId.random(randomPartitionKey());
  const raw = Buffer.concat([Buffer.from(id.bytes), Buffer.from([0, 0, 0, 17])]);
  const unpadded = `sign_1${raw.toString('base64url')}`;
  const padded = `sign_1${raw.toString('base64').replaceAll('+', '-').replaceAll('/', '_')}`;
  t.ok(padded.endsWith('='), `Java's form ends in padding: ${padded}`);
  for (const text of [unpadded, padded]) {
    const d = decodeAwakeableId(text);
    t.equal(d?.invocation.text, id.text, text);
    t.equal(d?.signalIndex, 17);
  }
  t.equal(decodeAwakeableId(`${unpadded}===`), undefined, 'three pad characters are not base64');
  t.equal(decodeAwakeableId(`sign_1=${raw.toString('base64url')}`), undefined, 'padding only at the end');
});

t.test('new ids carry the clock in the leading digits of their uuid: the store keys them together', async (t) => {
  const { idKeyText, idOfKeyText } = await import('../dist/storage/keys.js');
  const base = 1_800_000_000_000;
  const made = Array.from({ length: 1000 }, (_, i) => InvocationId.random(randomPartitionKey(), base + i));
  t.ok(made.every((id, i) => id.bytes.readUIntLE(18, 6) === base + i), 'uuid bytes 10–15 hold the millisecond');
  t.equal(new Set(made.map((id) => id.text)).size, 1000, 'distinct within the same milliseconds');
  const keys = made.map((id) => idKeyText(id.text));
  t.ok(keys.every((k, i) => k === made[i].text.slice(16) + made[i].text.slice(5, 16)), 'a key text is the uuid digits, then the partition key digits');
  t.ok(keys.every((k, i) => idOfKeyText(k) === made[i].text), 'a key text gives its id back');
  const shared = (a, b) => { let n = 0; while (n < a.length && a[n] === b[n]) n++; return n; };
  const common = keys.reduce((n, k) => Math.min(n, shared(k, keys[0])), Infinity);
  t.ok(common >= 6, `keys of a second's ids share their first ${common} characters`);
  const randomKeys = Array.from({ length: 1000 }, () => idKeyText(InvocationId.fromBytes(randomBytes(24)).text));
  t.ok(randomKeys.reduce((n, k) => Math.min(n, shared(k, randomKeys[0])), Infinity) <= 1, 'keys of random uuids share next to nothing');
  t.throws(() => idKeyText('inv_1bogus'), /not an invocation id/);
  t.throws(() => InvocationId.random(1n, 2 ** 48), /48 bits/);
});

t.test("ids kept alive do not keep Node's shared Buffer pool alive", async (t) => {
  // Ids outlive the requests that made them (the memo of recent ids, caches). Each made here
  // after a 7,000-byte allocation from Node's 8 KiB Buffer pool (the request's other small
  // buffers, all garbage): an id that were a slice of that pool would keep a slab alive each,
  // ~80 MB for these 10,000.
  const before = await collectedArrayBuffers();
  const kept = [];
  for (let i = 0; i < 10_000; i++) {
    Buffer.allocUnsafe(7_000);
    const how = i % 3;
    kept.push(how === 0 ? InvocationId.random(randomPartitionKey()) : how === 1 ? InvocationId.fromBytes(randomBytes(24)) : InvocationId.parse(InvocationId.random(1n).text));
  }
  const grownMb = ((await collectedArrayBuffers()) - before) / 1048576;
  t.ok(grownMb < 8, `array buffers grew ${grownMb.toFixed(1)} MB for ${kept.length} ids`);
});

t.test('ids derived from names are the bytes stored ids were made with: sha256 of the parts, each ended by a NUL', async (t) => {
  const reference = (...parts) => {
    const h = createHash('sha256');
    for (const p of parts) h.update(p).update('\0');
    return h.digest().subarray(0, 16);
  };
  const samples = [['workflow', 'Signup', 'alice'], ['idempotent', 'Svc', '', 'run', 'key-1'], ['workflow', 'Ünïcode', '🔑 key'], ['workflow', 'lone', '\ud800'], ['k', '']];
  for (const parts of samples) t.same(deterministicUuid(...parts), reference(...parts), parts.join('|'));
  t.equal(partitionKeyOf('Counter/c-1'), createHash('sha256').update('Counter/c-1').digest().readBigUInt64BE(0));
  const wf = workflowInvocationId('Signup', 'alice');
  t.equal(wf.partitionKey, createHash('sha256').update('Signup/alice').digest().readBigUInt64BE(0));
  t.same(Buffer.from(wf.bytes.subarray(8)), reference('workflow', 'Signup', 'alice'));
});
