// Property tests (fast-check) of the parsers that read untrusted bytes and text without a server:
// the service-protocol frame decoder, the message codecs, the config parser and the units.
// None may crash: each input is either read or refused with a stable code.
import t from 'tap';
import fc from 'fast-check';
import fs from 'node:fs';
import path from 'node:path';
import { FrameDecoder, encodeFrame } from '../dist/protocol/framing.js';
import { pb, decode } from '../dist/protocol/messages.js';
import { decodeCommand } from '../dist/log/commands.js';
import { loadConfig } from '../dist/config/index.js';
import { parseDuration_ms, parseSize_bytes } from '../dist/common/units.js';
import { KeelError } from '../dist/errors/index.js';
import { tempDir } from './helpers/keel.mjs';

const RUNS = 2000;
const coded = (err) => err instanceof KeelError && /^(META|RT|KEEL)\d{4}$/.test(err.code);

t.test('the frame decoder reads any byte stream in any split, or refuses it with RT0003', async (t) => {
  const LIMIT = 1024;
  fc.assert(
    fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 12 }), (chunks) => {
      const d = new FrameDecoder(LIMIT);
      try {
        for (const c of chunks) for (const f of d.push(Buffer.from(c))) if (f.payload.length > LIMIT) return false;
        return true;
      } catch (err) {
        return coded(err) && err.code === 'RT0003';
      }
    }),
    { numRuns: RUNS },
  );
  // Whole frames come back intact whatever the split.
  fc.assert(
    fc.property(fc.array(fc.record({ type: fc.integer({ min: 0, max: 0xffff }), payload: fc.uint8Array({ maxLength: 200 }) }), { maxLength: 8 }), fc.integer({ min: 1, max: 50 }), (frames, step) => {
      const bytes = Buffer.concat(frames.map((f) => encodeFrame(f.type, f.payload)));
      const d = new FrameDecoder(1 << 20);
      const out = [];
      for (let i = 0; i < bytes.length; i += step) out.push(...d.push(bytes.subarray(i, i + step)));
      return out.length === frames.length && out.every((f, i) => f.type === frames[i].type && Buffer.from(f.payload).equals(Buffer.from(frames[i].payload)));
    }),
    { numRuns: RUNS },
  );
  t.pass(`${2 * RUNS} byte streams`);
});

t.test('message and command decoders throw plain errors on garbage, never crash the process', async (t) => {
  let decoded = 0;
  let refused = 0;
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
      for (const codec of [pb.Start, pb.Suspension, pb.Error, pb.Notification, pb.Call, pb.Output]) {
        try {
          decode(codec, bytes);
          decoded++;
        } catch (err) {
          if (!(err instanceof Error)) return false;
          refused++;
        }
      }
      try {
        decodeCommand(bytes);
      } catch (err) {
        if (!(err instanceof Error)) return false;
      }
      return true;
    }),
    { numRuns: RUNS },
  );
  t.ok(decoded + refused > 0, `${decoded} decoded, ${refused} refused`);
});

t.test('the config parser reads any file and any KEEL_ variable, or refuses it with RT0002', async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, 'config.toml');
  const keys = ['base_dir', 'worker.partitions', 'worker.invoker.abort_timeout', 'worker.invoker.message_size_limit', 'default_retry_policy.max_attempts', 'log.format', 'nope.key'];
  const value = fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.double(), fc.boolean(), fc.constantFrom('1h', '10MiB', 'unlimited', 'pause', '-1', '0', 'PT1S'));
  fc.assert(
    fc.property(fc.oneof(fc.string({ maxLength: 200 }), fc.dictionary(fc.constantFrom(...keys), value).map((d) => Object.entries(d).map(([k, v]) => `${k} = ${JSON.stringify(v)}`).join('\n'))), (text) => {
      fs.writeFileSync(file, text);
      try {
        loadConfig(file, {});
        return true;
      } catch (err) {
        return coded(err) && err.code === 'RT0002';
      }
    }),
    { numRuns: 500 },
  );
  fc.assert(
    fc.property(fc.constantFrom('KEEL_WORKER__PARTITIONS', 'KEEL_WORKER__INVOKER__ABORT_TIMEOUT', 'KEEL_LOG__LEVEL', 'KEEL_NOPE'), fc.string({ maxLength: 30 }), (name, v) => {
      try {
        loadConfig(undefined, { [name]: v });
        return true;
      } catch (err) {
        return coded(err) && err.code === 'RT0002';
      }
    }),
    { numRuns: 500 },
  );
  t.pass('1000 configurations');
});

t.test('durations and sizes parse to finite, non-negative numbers or to nothing', async (t) => {
  fc.assert(
    fc.property(fc.oneof(fc.string({ maxLength: 30 }), fc.stringMatching(/^(P(T)?)?[0-9.e+]{1,40}[a-zA-Z]{0,6}$/)), (text) => {
      for (const parse of [parseDuration_ms, parseSize_bytes]) {
        const v = parse(text);
        if (v !== undefined && !(Number.isFinite(v) && v >= 0)) return false;
      }
      return true;
    }),
    { numRuns: RUNS },
  );
  t.pass(`${RUNS} texts`);
});
