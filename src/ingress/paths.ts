// Request paths as the ingress reads them: split on '/', each segment percent-decoded once. A
// segment that is not valid percent-encoding (`%ZZ`, or `%E0%A4` which is not UTF-8) is a 400
// naming the segment, never an exception.
import { KeelError } from '../errors/index.js';

/** At most this much of a bad segment is quoted back. */
const QUOTED_CHARS = 64;

/** The decoded segments of the path of `url` (the query is ignored), empty segments dropped. */
export function pathSegments(url: string): string[] {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const out: string[] = [];
  for (const raw of path.split('/')) {
    if (raw.length === 0) continue;
    out.push(decodeSegment(raw));
  }
  return out;
}

function decodeSegment(raw: string): string {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    const quoted = raw.length > QUOTED_CHARS ? `${raw.slice(0, QUOTED_CHARS)}…` : raw;
    throw new KeelError('KEEL0012', `the path segment '${quoted}' is not valid percent-encoded UTF-8`);
  }
}
