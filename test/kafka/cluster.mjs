#!/usr/bin/env node
// Three Apache Kafka brokers on loopback for trying a Keel cluster by hand (README, "Run a
// cluster"): `make kafka-cluster`. The same brokers as the tests' (test/helpers/kafka-cluster.mjs:
// KRaft, formatted fresh in a temporary directory, short sessions), on 127.0.0.1:19092-19094
// unless KAFKA_PORTS says otherwise. Ctrl-C stops them and deletes their data.
import { startKafkaCluster } from '../helpers/kafka-cluster.mjs';

const ports = (process.env.KAFKA_PORTS ?? '19092,19093,19094').split(',').map(Number);
const stops = [];
const t = { teardown: (fn) => stops.push(fn) };
const cluster = await startKafkaCluster(t, { brokers: ports.length, ports });
console.log(`kafka brokers: ${cluster.brokers.join(',')}  (Ctrl-C stops them)`);
const stop = async () => {
  for (const fn of stops.reverse()) await fn();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
