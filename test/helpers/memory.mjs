// Memory measured from a test: the bytes of ArrayBuffers (Buffers) alive after full collections.
import v8 from 'node:v8';
import vm from 'node:vm';

v8.setFlagsFromString('--expose_gc');
const gc = vm.runInNewContext('gc');

/** `process.memoryUsage().arrayBuffers` after collecting garbage (they are freed after a collection, not in it). */
export async function collectedArrayBuffers() {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 20));
  }
  return process.memoryUsage().arrayBuffers;
}
