/**
 * `import()` of a package that loads on first use (prom-client, pg-gateway, the AWS SDK).
 *
 * The server's bundle runs as a `vm.Script` compiled with V8's code cache (see `main.ts`). On
 * Node 20, a script deserialised from the cache loses its dynamic-import callback: every
 * `import()` in it then throws ERR_VM_DYNAMIC_IMPORT_CALLBACK_MISSING (from the second start on:
 * the first one writes the cache). So the entry, a real ES module whose `import()` always works,
 * lends its own; without an entry's (tests, the per-file build) the module's `import()` is used.
 */
type Importer = (specifier: string) => Promise<unknown>;

export const ENTRY_IMPORT = Symbol.for('keel.import');

export function loadPackage<T>(specifier: string): Promise<T> {
  const entry = (globalThis as Record<symbol, unknown>)[ENTRY_IMPORT] as Importer | undefined;
  return (entry !== undefined ? entry(specifier) : import(specifier)) as Promise<T>;
}
