// GetInvocationOutput from a handler. The TS SDK has no API for this command, so a
// hand-written endpoint issues it and reads the completion Keel sends back on the stream.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress } from './helpers/keel.mjs';
import { rawEndpoint, encodeFrame, encode, pb, MessageType, outputAndEnd } from './services/raw-endpoint.mjs';
import { FrameDecoder } from '../dist/protocol/framing.js';
import { decode } from '../dist/protocol/messages.js';
import { InvocationId, randomPartitionKey } from '../dist/common/ids.js';

const slow = restate.service({
  name: 'Slow',
  handlers: { answer: async (ctx, n) => (await ctx.sleep(n), `answer after ${n}`) },
});

t.test('GetInvocationOutput from a handler: the value when completed, void while running', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '4' } });
  await register(keel, await serveServices(t, [slow]));
  let target = '';
  const ep = await rawEndpoint(t, {
    handlers: {
      output: (req, res, ctx) => {
        res.writeHead(200, { 'content-type': ctx.contentType });
        res.write(encodeFrame(MessageType.GetInvocationOutputCommand, encode(pb.GetInvocationOutput, { invocation_id: target, result_completion_id: 1 })));
        const decoder = new FrameDecoder(1 << 20);
        req.on('data', (chunk) => {
          for (const f of decoder.push(chunk)) {
            if (f.type !== MessageType.GetInvocationOutputCompletion) continue;
            const n = decode(pb.Notification, f.payload);
            const seen = n.value ? `value ${n.value.content.toString()}` : n.void ? 'not ready' : `failure ${n.failure?.code}`;
            res.end(outputAndEnd(`${n.completion_id}: ${seen}`));
          }
        });
      },
    },
  });
  await register(keel, ep.uri);

  const running = await ingress(keel, '/Slow/answer/send', 60_000);
  target = running.body.invocationId;
  t.same((await ingress(keel, '/Raw/output', null)).body, '1: not ready', 'a running invocation has no output yet');

  const done = await ingress(keel, '/Slow/answer', 10);
  target = done.headers.get('x-restate-id');
  t.same((await ingress(keel, '/Raw/output', null)).body, '1: value "answer after 10"', 'a completed one answers with its output');

  target = InvocationId.random(randomPartitionKey()).text;
  t.same((await ingress(keel, '/Raw/output', null)).body, '1: failure 404', 'an unknown invocation is a 404 failure');
  await fetch(`${keel.admin}/invocations/${running.body.invocationId}/kill`, { method: 'PATCH' });
});
