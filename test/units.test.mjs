import t from 'tap';
import { parseDuration_ms, parseSize_bytes } from '../dist/common/units.js';

t.test('durations', async (t) => {
  t.equal(parseDuration_ms('10s'), 10_000);
  t.equal(parseDuration_ms('1m 30s'), 90_000);
  t.equal(parseDuration_ms('500ms'), 500);
  t.equal(parseDuration_ms('PT10S'), 10_000);
  t.equal(parseDuration_ms('0'), 0);
  t.equal(parseDuration_ms('ten seconds'), undefined);
  t.equal(parseDuration_ms('10'), undefined);
});

t.test('sizes', async (t) => {
  t.equal(parseSize_bytes('32MiB'), 32 * 1024 * 1024);
  t.equal(parseSize_bytes('10 MB'), 10_000_000);
  t.equal(parseSize_bytes('12 parsecs'), undefined);
});
