// Preloaded into a Keel server (NODE_OPTIONS=--require) by test/partition-threads.test.mjs: the
// partition thread named by END_PARTITION_THREAD (`keel-partitions-<n>`) is ended with
// Worker.terminate(), as the runtime ends a thread that ran out of heap or threw where nothing
// caught it — on SIGUSR2 (END_PARTITION_THREAD_ON unset or `signal`), or instead of receiving
// the server's stop (`stop`: the thread dies during the shutdown, before it closed its
// partitions). Nothing in the server is changed; only the thread's end comes from outside.
// It works because the server is a CommonJS bundle that reads `Worker` off the module when it
// makes a thread: an ESM build importing it by name would not see the replacement.
'use strict';
const threads = require('node:worker_threads');

if (threads.isMainThread) {
  const name = `keel-partitions-${process.env.END_PARTITION_THREAD ?? '1'}`;
  const on = process.env.END_PARTITION_THREAD_ON ?? 'signal';
  const Base = threads.Worker;
  threads.Worker = class extends Base {
    constructor(file, options) {
      super(file, options);
      if (options?.name !== name) return;
      if (on === 'signal') process.once('SIGUSR2', () => void this.terminate());
      else if (on === 'stop') {
        this.postMessage = (message, transfer) => (message?.t === 'stop' ? void this.terminate() : Base.prototype.postMessage.call(this, message, transfer));
      } else throw new Error(`END_PARTITION_THREAD_ON is signal or stop, got ${on}`);
    }
  };
}
