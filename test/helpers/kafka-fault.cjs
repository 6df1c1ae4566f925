// Preloaded into a Keel server (NODE_OPTIONS=--require) by test/cluster.test.mjs: the first
// KAFKA_FAULT_SENDS sends of kafkajs producers to topic KAFKA_FAULT_TOPIC fail as a send fails
// whose broker refused the connection through all of kafkajs's retries (KafkaJSNumberOfRetriesExceeded,
// not retriable itself, caused by a KafkaJSConnectionError, retriable), without reaching a broker
// and without the ~15 s of retries. Only `producer.send` (Keel's log without transactions), not a
// transaction's `send`. A real broker refuses so only while it is down and not yet fenced
// (~1.5 s in these tests), too short to aim a node's takeover at; test/kafka-log.test.mjs shows
// the real refusal. Nothing in the server is changed: it reads kafkajs's `Kafka` off the module
// when it builds its client (kafkajs is outside the bundle, so this is the same module).
'use strict';
const kafkajs = require('kafkajs');

const topic = process.env.KAFKA_FAULT_TOPIC;
let left = Number(process.env.KAFKA_FAULT_SENDS ?? '0');
if (topic === undefined || !Number.isSafeInteger(left) || left < 0) throw new Error('kafka-fault.cjs: set KAFKA_FAULT_TOPIC and KAFKA_FAULT_SENDS (a count)');

// KAFKA_FAULT_DELAY_MS: each refused send is held this long first, as kafkajs's own retries hold it
// (~15 s); a producer disconnected meanwhile fails it at once, as kafkajs fails a send on a producer
// that is disconnecting.
const delayMs = Number(process.env.KAFKA_FAULT_DELAY_MS ?? '0');
if (!Number.isSafeInteger(delayMs) || delayMs < 0) throw new Error('kafka-fault.cjs: KAFKA_FAULT_DELAY_MS is a count of ms');

const producer = kafkajs.Kafka.prototype.producer;
kafkajs.Kafka.prototype.producer = function (...args) {
  const p = producer.apply(this, args);
  const send = p.send;
  const disconnect = p.disconnect;
  let disconnected;
  const disconnecting = new Promise((resolve) => (disconnected = resolve));
  p.disconnect = (...a) => {
    disconnected();
    return disconnect(...a);
  };
  p.send = async (request) => {
    if (request?.topic === topic && left > 0) {
      left -= 1;
      process.stderr.write(`kafka-fault.cjs: a send to ${topic} refused (${left} more)${delayMs > 0 ? `, held ${delayMs} ms first` : ''}\n`);
      if (delayMs > 0) {
        let timer;
        const gone = await Promise.race([new Promise((resolve) => (timer = setTimeout(() => resolve(false), delayMs))), disconnecting.then(() => true)]);
        clearTimeout(timer);
        if (gone) process.stderr.write(`kafka-fault.cjs: a held send to ${topic} failed: its producer is disconnecting\n`);
        if (gone) throw new kafkajs.KafkaJSNonRetriableError("The producer is disconnecting; therefore, it can't safely accept messages anymore");
      }
      const refused = new kafkajs.KafkaJSConnectionError('Connection error: connect ECONNREFUSED (refused by test/helpers/kafka-fault.cjs)', { broker: 'injected' });
      throw new kafkajs.KafkaJSNumberOfRetriesExceeded(refused, { retryCount: 30, retryTime: 500 });
    }
    return send(request);
  };
  return p;
};
