#!/usr/bin/env node
// The server's entry. The server is one bundled CommonJS file (`npm run build`), so that loading
// it is one file read instead of a thousand module resolutions, and it is compiled through
// `vm.Script` with V8's code cache: the functions a start compiled are kept beside the bundle and
// the next start skips parsing and compiling them (startup CPU ~500 ms → ~300 ms on Node 20,
// which has no `module.enableCompileCache`). A missing, stale or rejected cache only costs that.
import fs from 'node:fs';
import Module, { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';
import { ENTRY_IMPORT } from './common/load-package.js';

/** Long enough for the start and the first requests to have compiled what they use. */
const CACHE_WRITE_DELAY_MS = 5_000;

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'bundle');
const file = path.join(dir, 'keel.cjs');
const source = fs.readFileSync(file, 'utf8');
const stat = fs.statSync(file);
// The bundle's size and time and the Node version name the cache: a rebuild or another Node
// never reads a cache made for something else.
const cacheFile = path.join(dir, `keel.cjs.${process.version}.${stat.size}.${Math.round(stat.mtimeMs)}.v8cache`);
let cachedData: Buffer | undefined;
try {
  cachedData = fs.readFileSync(cacheFile);
} catch {
  cachedData = undefined;
}
// Packages the bundle loads when first needed come through this module's import(): on Node 20 a
// script read from the code cache has lost its own dynamic-import callback
// (ERR_VM_DYNAMIC_IMPORT_CALLBACK_MISSING from the second start on).
(globalThis as Record<symbol, unknown>)[ENTRY_IMPORT] = (specifier: string) => import(specifier);
const script = new vm.Script(Module.wrap(source), {
  filename: file,
  ...(cachedData !== undefined ? { cachedData } : {}),
});
// For the "keel is ready" line: whether this start read the cache.
(globalThis as Record<symbol, unknown>)[Symbol.for('keel.code_cache')] = cachedData === undefined ? 'none' : script.cachedDataRejected === true ? 'rejected' : 'used';
const wrapper = script.runInThisContext() as (exports: object, require: NodeJS.Require, module: object, filename: string, dirname: string) => void;
const bundle = { exports: {}, filename: file, id: file, loaded: false };
wrapper.call(bundle.exports, bundle.exports, createRequire(file), bundle, file, dir);

if (cachedData === undefined || script.cachedDataRejected === true) {
  setTimeout(() => writeCache(script, cacheFile), CACHE_WRITE_DELAY_MS).unref();
}

/** Best effort: a read-only install runs without a cache. Written whole or not at all. */
function writeCache(s: vm.Script, to: string): void {
  const tmp = `${to}.${process.pid}.tmp`;
  try {
    // Older caches of this Node (another build's); other Nodes' caches stay for their starts.
    const mine = `keel.cjs.${process.version}.`;
    for (const old of fs.readdirSync(path.dirname(to))) if (old.startsWith(mine) && old.endsWith('.v8cache')) fs.rmSync(path.join(path.dirname(to), old), { force: true });
    fs.writeFileSync(tmp, s.createCachedData());
    fs.renameSync(tmp, to);
  } catch {
    fs.rmSync(tmp, { force: true });
  }
}
