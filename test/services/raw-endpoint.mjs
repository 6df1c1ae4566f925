// A hand-written service endpoint over HTTP/2 cleartext: a valid discovery manifest, and
// invocation answers crafted frame by frame (8-byte header + protobuf), to create protocol
// conditions a real SDK never produces.
import http2 from 'node:http2';
import { encodeFrame } from '../../dist/protocol/framing.js';
import { MessageType, encode, pb } from '../../dist/protocol/messages.js';

export { encodeFrame, MessageType, encode, pb };

/** Frames of a successful completion with `value` (bytes of JSON). */
export function outputAndEnd(value) {
  return Buffer.concat([
    encodeFrame(MessageType.OutputCommand, encode(pb.Output, { value: { content: Buffer.from(JSON.stringify(value)) } })),
    encodeFrame(MessageType.End, encode(pb.End, {})),
  ]);
}

/**
 * `handlers`: { name: (req, res, ctx) => void } where ctx = { contentType, body: Promise<Buffer> }.
 * Each handler answers as it likes. Returns { uri, calls, close() }.
 */
export async function rawEndpoint(t, { service = 'Raw', handlers, protocolMode = 'BIDI_STREAM', serviceOptions = {} }) {
  const calls = [];
  const manifest = {
    protocolMode,
    minProtocolVersion: 5,
    maxProtocolVersion: 7,
    services: [{ name: service, ty: 'SERVICE', handlers: Object.keys(handlers).map((name) => ({ name })), ...serviceOptions }],
  };
  const server = http2.createServer();
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  server.on('request', (req, res) => {
    if (req.url === '/discover') {
      res.writeHead(200, { 'content-type': 'application/vnd.restate.endpointmanifest.v3+json' });
      res.end(JSON.stringify(manifest));
      return;
    }
    const m = /^\/invoke\/([^/]+)\/([^/]+)$/.exec(req.url);
    const h = m && m[1] === service ? handlers[m[2]] : undefined;
    if (!h) {
      res.writeHead(404).end();
      return;
    }
    const chunks = [];
    const body = new Promise((resolve) => {
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => resolve(Buffer.concat(chunks)));
    });
    req.on('error', () => {});
    res.on('error', () => {});
    calls.push({ handler: m[2], at: Date.now() });
    h(req, res, { contentType: req.headers['content-type'], body });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const ep = {
    uri: `http://127.0.0.1:${server.address().port}/`,
    calls,
    close: () =>
      new Promise((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  };
  t.teardown(ep.close);
  return ep;
}
