// Key layout shared by the tables of the worker store. Every key of a partition starts with
// `p<partition>/`; materialised state lives under `p<partition>/s/<table>/`, the log under
// `p<partition>/log/`. Keys are strings; numbers in keys are zero-padded so that keys sort
// numerically. Only `storage/tables/*` builds keys.

import { assert } from '../common/assert.js';

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

/**
 * Store-safe name of a virtual object or workflow instance: `service/key`, each URI-encoded; in a
 * flow-control scope `:scope/service/key` (URI encoding turns every `:` into %3A, so no unscoped
 * name starts with one, and a scope is [a-zA-Z0-9_.-]: the two never meet).
 */
export function objectKeyOf(service: string, key: string, scope?: string): string {
  const unscoped = `${encodeURIComponent(service)}/${encodeURIComponent(key)}`;
  return scope === undefined ? unscoped : `:${scope}/${unscoped}`;
}

/** The service, key and scope an object key was made of. */
export function splitObjectKey(objectKey: string): { service: string; key: string; scope?: string } {
  let rest = objectKey;
  let scope: string | undefined;
  if (rest.startsWith(':')) {
    const end = rest.indexOf('/');
    scope = rest.slice(1, end);
    rest = rest.slice(end + 1);
  }
  const cut = rest.indexOf('/');
  const out = { service: decodeURIComponent(rest.slice(0, cut)), key: decodeURIComponent(rest.slice(cut + 1)) };
  return scope === undefined ? out : { ...out, scope };
}

/**
 * The key text of an invocation id in the tables keyed by it (`inv`, `live`, `restart`, `j`): its
 * uuid's 22 digits, then its partition key's 11 (the id's text is `inv_1` + partition key + uuid).
 * A new id's uuid starts with the clock (common/ids.ts), so the rows of new invocations land
 * together instead of among every retained one, and LevelDB's compactions of them rewrite a few
 * table files rather than old ones across the whole key range (format 5). A string reorder: ids
 * are turned into keys for every read and write of the fold.
 */
export function idKeyText(id: string): string {
  assert(id.length === ID_TEXT_LENGTH && id.startsWith(ID_PREFIX), () => `not an invocation id: ${id}`);
  return id.slice(ID_UUID_AT) + id.slice(ID_PREFIX.length, ID_UUID_AT);
}

/** The invocation id of a key text made by `idKeyText`. */
export function idOfKeyText(text: string): string {
  assert(text.length === ID_KEY_LENGTH, () => `not an invocation id key: ${text}`);
  return ID_PREFIX + text.slice(UUID_DIGITS) + text.slice(0, UUID_DIGITS);
}

const ID_PREFIX = 'inv_1';
const PK_DIGITS = 11;
const UUID_DIGITS = 22;
const ID_UUID_AT = ID_PREFIX.length + PK_DIGITS;
const ID_TEXT_LENGTH = ID_UUID_AT + UUID_DIGITS;
const ID_KEY_LENGTH = UUID_DIGITS + PK_DIGITS;
