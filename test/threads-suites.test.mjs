// The suites whose requests partition threads route differently (worker.threads > 1, issue 23),
// run again against three threads: awakeables resolved from the ingress (an append to the owner),
// objects and workflows (calls between threads, attach, output), idempotency keys (ids that exist
// already), cancellation and the admin actions (keyed calls), SQL over every thread, schedules,
// flow control (full backlogs, deployment limits for the process), state TTLs (broadcast rule
// books) and Kafka subscriptions (consumers on the main thread, positions and pending counts
// mirrored from the threads, appends to the owner). Each suite's own file runs it against one thread.
process.env.KEEL_TEST_THREADS = '3';
await import('./awakeables.test.mjs');
await import('./objects.test.mjs');
await import('./workflows.test.mjs');
await import('./idempotency.test.mjs');
await import('./cancellation.test.mjs');
await import('./admin-query.test.mjs');
await import('./schedules.test.mjs');
await import('./flow-control.test.mjs');
await import('./state-ttl.test.mjs');
await import('./subscriptions.test.mjs');
await import('./subscriptions-delivery.test.mjs');
