// The benchmark's SDK service (bench/service.mjs) served by several processes: on a machine with cores to spare,
// one Node process would be what limits the scaling cell at 4 and 8 server cores (it spends about as much CPU
// per call as Keel). Its streams-per-connection limit makes a server open several connections, which the
// cluster spreads over its processes.
import http2 from 'node:http2';
import t from 'tap';
import { stopGroup } from '../bench/children.mjs';
import { groupPids } from '../bench/proc.mjs';
import { serviceShape } from '../bench/service.mjs';
import { startService } from '../bench/targets.mjs';

t.test('the shape is read from the environment, and refused when it makes no sense', async (t) => {
  t.same(serviceShape({}), { workers: 1, maxStreams: undefined }, 'one process, Node\'s streams limit');
  t.same(serviceShape({ BENCH_SERVICE_WORKERS: '6', BENCH_SERVICE_MAX_STREAMS: '4' }), { workers: 6, maxStreams: 4 });
  t.throws(() => serviceShape({ BENCH_SERVICE_WORKERS: '0' }), /BENCH_SERVICE_WORKERS must be an integer >= 1, got '0'/);
  t.throws(() => serviceShape({ BENCH_SERVICE_WORKERS: 'two' }), /BENCH_SERVICE_WORKERS/);
  t.throws(() => serviceShape({ BENCH_SERVICE_MAX_STREAMS: '1.5' }), /BENCH_SERVICE_MAX_STREAMS must be an integer >= 1, got '1.5'/);
  t.throws(() => serviceShape({ BENCH_SERVICE_WORKERS: '2', BENCH_COUNTER_PORT: '9999' }), /BENCH_COUNTER_PORT counts one process's calls/);
});

/** Opens a connection, reads the peer's SETTINGS and GETs /discover on it. */
async function discover(url) {
  const session = http2.connect(url);
  try {
    await new Promise((resolve, reject) => session.once('remoteSettings', resolve).once('error', reject));
    const body = await new Promise((resolve, reject) => {
      const req = session.request({ ':path': '/discover', accept: 'application/vnd.restate.endpointmanifest.v3+json' });
      let text = '';
      req.setEncoding('utf8').on('data', (d) => (text += d)).once('end', () => resolve(text)).once('error', reject);
    });
    return { maxStreams: session.remoteSettings.maxConcurrentStreams, manifest: JSON.parse(body) };
  } finally {
    session.close();
  }
}

t.test('three processes on one port, each connection told its streams limit', async (t) => {
  const service = await startService(process.execPath, 'shape-test', { env: { BENCH_SERVICE_WORKERS: '3', BENCH_SERVICE_MAX_STREAMS: '4' } });
  t.teardown(() => stopGroup(service.child));
  t.equal(groupPids(service.child.pid).length, 4, 'the primary and three serving processes');
  const answers = await Promise.all([1, 2, 3, 4, 5, 6].map(() => discover(service.url)));
  for (const a of answers) {
    t.equal(a.maxStreams, 4, 'SETTINGS_MAX_CONCURRENT_STREAMS is the configured limit');
    t.ok(a.manifest.services.some((s) => s.name === 'Bench'), 'and the endpoint answers discovery');
  }
  const alone = await startService(process.execPath, 'shape-test-alone');
  t.teardown(() => stopGroup(alone.child));
  t.equal(groupPids(alone.child.pid).length, 1, 'by default one process, as before');
  t.not((await discover(alone.url)).maxStreams, 4, 'and Node\'s own streams limit');
});
