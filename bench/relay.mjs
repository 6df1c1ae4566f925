// The `relay` target: the floor under every server on this machine. It takes the ingress calls (HTTP/1.1) and
// plays the service protocol with the SDK service (HTTP/2, bidirectional) with nothing else: no journal, no log,
// no store, no fsync, no retries, no state (so no object cells). Whatever it cannot reach, no durable server
// written in TypeScript can either: the SDK service and the load generator share the same two cores.
// Run: node bench/relay.mjs <sdk service url> <port>   (GET /health answers 200 once it listens)
import * as http from 'node:http';
import * as http2 from 'node:http2';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './common.mjs';

// ================================================================ adapter: all of Keel's API this file uses
const DIST = resolve(process.env.BENCH_KEEL_DIST ?? join(ROOT, 'dist'));
const load = (p) => import(pathToFileURL(join(DIST, p)).href);
const [framing, messages, versions, ids] = await Promise.all([load('protocol/framing.js'), load('protocol/messages.js'), load('protocol/versions.js'), load('common/ids.js')]);
const { MessageType: MT, REQUESTED_ACK_FLAG, pb, encode, decode } = messages;
const frame = (type, codec, value) => framing.encodeFrame(type, encode(codec, value));
// ================================================================

const [sdkUrl, port] = [process.argv[2], Number(process.argv[3])];
const CONTENT_TYPE = versions.invocationContentType(5);
/** As Keel's pool: a few connections, streams spread over them. */
const sessions = Array.from({ length: 4 }, () => http2.connect(sdkUrl).on('error', (e) => console.error(`relay: ${e.message}`)));
let next = 0;

function invoke(path, body, res) {
  const id = ids.InvocationId.random(ids.randomPartitionKey());
  const stream = sessions[next++ % sessions.length].request({ ':method': 'POST', ':path': `/invoke${path}`, 'content-type': CONTENT_TYPE, accept: CONTENT_TYPE, 'x-restate-invocation-id': id.text });
  const answer = (status, bytes) => {
    if (res.headersSent) return;
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(bytes);
  };
  stream.on('error', (e) => answer(502, e.message));
  // A stream that ends without End (the service failed or went away) answers too: no client waits for its timeout.
  stream.on('close', () => answer(502, 'the service closed the invocation stream without End'));
  stream.write(Buffer.concat([frame(MT.Start, pb.Start, { id: id.bytes, debug_id: id.text, known_entries: 1, key: '', random_seed: 1 }), frame(MT.InputCommand, pb.Input, { headers: [], value: { content: body } })]));
  const decoder = new framing.FrameDecoder(32 * 1024 * 1024);
  let output = Buffer.alloc(0);
  stream.on('data', (chunk) => {
    for (const f of decoder.push(chunk)) {
      if (f.type === MT.ProposeRunCompletion) {
        const p = decode(pb.ProposeRunCompletion, f.payload);
        const completion_id = p.result_completion_id ?? 0;
        stream.write(f.flags & REQUESTED_ACK_FLAG ? frame(MT.ProposeRunCompletionAck, pb.ProposeRunCompletionAck, { completion_id }) : frame(MT.RunCompletion, pb.Notification, { completion_id, value: { content: p.value ?? Buffer.alloc(0) } }));
      } else if (f.type === MT.SleepCommand) {
        const s = decode(pb.Sleep, f.payload);
        setTimeout(() => stream.write(frame(MT.SleepCompletion, pb.Notification, { completion_id: s.result_completion_id ?? 0, void: {} })), Math.max(0, Number(s.wake_up_time ?? 0) - Date.now()));
      } else if (f.type === MT.OutputCommand) output = decode(pb.Output, f.payload).value?.content ?? Buffer.alloc(0);
      else if (f.type === MT.End) {
        answer(200, output);
        stream.end();
      } else if (f.type === MT.Error) {
        answer(500, JSON.stringify(decode(pb.Error, f.payload)));
        stream.close();
      }
    }
  });
}

http
  .createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health') return res.end('ok');
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => invoke(req.url, Buffer.concat(chunks), res));
  })
  .listen(port, '127.0.0.1', () => console.error(`relay listening on ${port}, SDK at ${sdkUrl}`));
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
