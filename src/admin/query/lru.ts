// Bounded caches as Maps in least-recently-used order (a Map iterates in insertion order): the
// engine's parses and templates, the server's constant answers and journal shapes.

/** The value of `key`, made the most recently used. */
export function recall<T>(cache: Map<string, T>, key: string): T | undefined {
  const value = cache.get(key);
  if (value !== undefined) {
    cache.delete(key);
    cache.set(key, value);
  }
  return value;
}

/** Keeps `value` as the most recently used; past `max` entries the least recently used goes. */
export function keep<T>(cache: Map<string, T>, key: string, value: T, max: number): void {
  cache.delete(key);
  cache.set(key, value);
  if (cache.size > max) cache.delete(cache.keys().next().value as string);
}
