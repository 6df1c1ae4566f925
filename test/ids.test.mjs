// Invocation ids: the text form is what Restate makes (the restate CLI decodes it client-side),
// checked against a reference written with BigInt, for random ids and the edge values.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { InvocationId, partitionKeyOfIdBytes, randomPartitionKey, isDeploymentId, newDeploymentId } from '../dist/common/ids.js';

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
