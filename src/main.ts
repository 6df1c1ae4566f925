#!/usr/bin/env node
// The server's entry. Node >= 22.1 keeps the compiled code of the server between starts
// (about a third of startup); the server itself is one bundled file (`npm run build`) so that
// loading it is one file read instead of a thousand module resolutions.
import module from 'node:module';

module.enableCompileCache?.();
// @ts-expect-error built by esbuild after tsc (package.json "build"); dist/run.js is the unbundled equivalent
await import('./bundle/keel.js');
