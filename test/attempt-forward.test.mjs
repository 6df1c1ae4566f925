// An attempt launched after a notification was folded, but before that batch's actions ran
// (the partition acknowledges a batch while the next one is written): the notification is in
// its replay, and the forward action that follows must not deliver it a second time.
import t from 'tap';
import { Attempt } from '../dist/invoker/attempt.js';
import { silentLogger } from '../dist/common/logger.js';
import { MessageType, InvocationId, encode, pb } from './helpers/fold.mjs';
import { randomPartitionKey } from '../dist/common/ids.js';

t.test('a notification already in the replay is not forwarded again; a later one is', async (t) => {
  const id = InvocationId.random(randomPartitionKey());
  const frames = [];
  const endpoints = { openStream: () => ({ write: (b) => frames.push(b), end() {}, finish() {}, abort() {} }) };
  const sleep = { type: MessageType.SleepCommand, payload: encode(pb.Sleep, { wake_up_time: 1, result_completion_id: 1 }) };
  const woke = { type: MessageType.SleepCompletion, payload: encode(pb.Notification, { completion_id: 1, void: {} }) };
  const input = { type: MessageType.InputCommand, payload: encode(pb.Input, {}) };
  const attempt = new Attempt({
    status: { id: id.text, epoch: 0, service: 'S', handler: 'h', key: '', retry_count: 0, modified_at_ms: Date.now() },
    journal: [input, sleep, woke],
    deployment: { id: 'dp_1', uri: 'http://127.0.0.1:1', protocol_type: 'BidiStream', use_http_11: false, additional_headers: {} },
    protocol_version: 5,
    inactivity_timeout_ms: 60_000,
    abort_timeout_ms: 60_000,
    message_size_limit_bytes: 1 << 20,
    append: async () => {},
    onClose: () => {},
    failed: (f) => f,
    state: { entries: [], partial: false },
    resolveCall: () => ({ error_code: 'RT0018', message: 'none' }),
    endpoints,
    logger: silentLogger,
  });
  attempt.start();
  t.equal(frames.length, 1, 'the start message and the replay, in one write');
  attempt.forward(woke.type, woke.payload, 2);
  t.equal(frames.length, 1, 'entry 2 was replayed: not sent again');
  const later = encode(pb.Notification, { completion_id: 2, void: {} });
  attempt.forward(MessageType.SleepCompletion, later, 3);
  t.equal(frames.length, 2, 'entry 3 came after the replay: forwarded');
  attempt.forward(MessageType.ProposeRunCompletionAck, encode(pb.ProposeRunCompletionAck, { completion_id: 4 }));
  t.equal(frames.length, 3, 'a reply to the attempt (no entry index) is always sent');
  attempt.abort();
});
