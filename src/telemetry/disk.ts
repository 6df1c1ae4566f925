import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Bytes of every file under `dir` (0 when it does not exist). Run at scrape time only: a
 * LevelDB store holds a few hundred files at most, so a walk costs well under a millisecond.
 */
export async function directorySize_bytes(dir: string): Promise<number> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  const sizes = await Promise.all(
    entries.map(async (e) => {
      const p = join(dir, e.name);
      if (e.isDirectory()) return directorySize_bytes(p);
      if (!e.isFile()) return 0;
      // A file may go between readdir and stat (LevelDB compaction): it counts as 0.
      return stat(p).then((s) => s.size, () => 0);
    }),
  );
  return sizes.reduce((a, b) => a + b, 0);
}
