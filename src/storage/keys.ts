// Key layout shared by the tables of the worker store. Every key of a partition starts with
// `p<partition>/`; materialised state lives under `p<partition>/s/<table>/`, the log under
// `p<partition>/log/`. Keys are strings; numbers in keys are zero-padded so that keys sort
// numerically. Only `storage/tables/*` builds keys.

/** Zero-padded decimal so that keys sort numerically. */
export function pad(n: number | bigint, width = 16): string {
  return n.toString().padStart(width, '0');
}

export function partitionPrefix(partition: number): string {
  return `p${partition}/`;
}

/** Prefix of every materialised-state key of a partition (what the rebuild check compares). */
export function statePrefix(partition: number): string {
  return `p${partition}/s/`;
}

export function tablePrefix(partition: number, table: string): string {
  return `${statePrefix(partition)}${table}/`;
}

/** The key range of one table of one partition, for iterators. */
export function tableRange(partition: number, table: string): { gte: string; lt: string } {
  const prefix = tablePrefix(partition, table);
  return { gte: prefix, lt: `${prefix}~` };
}

/** Store-safe name of a virtual object or workflow instance: `service/key`, each URI-encoded. */
export function objectKeyOf(service: string, key: string): string {
  return `${encodeURIComponent(service)}/${encodeURIComponent(key)}`;
}

/** The service and key an object key was made of. */
export function splitObjectKey(objectKey: string): { service: string; key: string } {
  const cut = objectKey.indexOf('/');
  return { service: decodeURIComponent(objectKey.slice(0, cut)), key: decodeURIComponent(objectKey.slice(cut + 1)) };
}
