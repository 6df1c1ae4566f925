// Query texts that differ only in their string literals share a shape: `restate invocations
// describe` sends the same three texts for every invocation, with its id in them. What the engine
// learns from parsing one text of a shape (which tables it reads, the values its WHERE pins, the
// rewrites) holds for every other, with the other's literals in place of the first's: the parse,
// a round trip to DuckDB of 2–4 ms, is paid once per shape instead of once per id.
//
// The shape is cut here, in JavaScript, without DuckDB: string literals ('…', '' inside for a
// quote) are the only variable parts. Anything this scanner does not fully understand — comments,
// dollar quoting, parameters spelled with $, prefixed strings (E'…', X'…', U&'…') — has no shape,
// and the text is parsed as it is. Whether the literals really are only constants is checked on
// DuckDB's tree of the shape (markersAreConstants): a literal the parser reads as anything else
// (a file name, two literals it joins into one) leaves the shape without a template.

import type { Ast } from './analyze.js';

export interface Shape {
  /** The text with every literal emptied: equal for texts that differ only in literals. */
  key: string;
  /** The literals' values, in order (quotes undone). */
  literals: string[];
  /** The text around the literals: literals.length + 1 parts. */
  parts: string[];
}

/** A quote right after one of these is not a plain literal's (E'…', X'…', B'…', U&'…', "x"'y'). */
const PREFIX = /[A-Za-z0-9_$&"']/;

/** The end of a quoted run starting at `open` (`q` doubled inside stands for itself), or -1. */
function closing(sql: string, open: number, q: string): number {
  for (let i = open + 1; ; i += 2) {
    i = sql.indexOf(q, i);
    if (i < 0) return -1;
    if (sql[i + 1] !== q) return i;
  }
}

/** The shape of `sql`, or undefined when it holds something the scanner does not read. */
export function shapeOf(sql: string): Shape | undefined {
  const parts: string[] = [];
  const literals: string[] = [];
  let from = 0;
  let i = 0;
  while (i < sql.length) {
    const ch = sql[i]!;
    if (ch === "'") {
      if (i > 0 && PREFIX.test(sql[i - 1]!)) return undefined;
      const end = closing(sql, i, "'");
      if (end < 0) return undefined;
      parts.push(sql.slice(from, i));
      literals.push(sql.slice(i + 1, end).replaceAll("''", "'"));
      from = i = end + 1;
    } else if (ch === '"') {
      const end = closing(sql, i, '"');
      if (end < 0) return undefined;
      i = end + 1;
    } else if (ch === '$' || (ch === '-' && sql[i + 1] === '-') || (ch === '/' && sql[i + 1] === '*')) {
      return undefined;
    } else i++;
  }
  parts.push(sql.slice(from));
  return { key: parts.join("''"), literals, parts };
}

/** The text of `shape` with `mark(i)` as the i-th literal's value. */
export function markedText(shape: Shape, mark: (i: number) => string): string {
  let out = shape.parts[0]!;
  for (let i = 0; i < shape.literals.length; i++) out += `'${mark(i)}'${shape.parts[i + 1]!}`;
  return out;
}

const isNode = (a: Ast | undefined): a is { [key: string]: Ast } => typeof a === 'object' && a !== null && !Array.isArray(a);

/**
 * Whether each marker is, exactly once, the whole value of a VARCHAR constant of the tree, and
 * `tag` (which every marker holds) appears nowhere else: then the tree of any text of the shape
 * is this one with other constants.
 */
export function markersAreConstants(root: Ast, markers: readonly string[], tag: string): boolean {
  const wanted = new Set(markers);
  const seen = new Set<string>();
  let tagged = 0;
  const stack: Ast[] = [root];
  while (stack.length > 0) {
    const a = stack.pop()!;
    if (typeof a === 'string') {
      if (a.includes(tag)) tagged++;
    } else if (Array.isArray(a)) stack.push(...a);
    else if (isNode(a)) {
      const v = a.class === 'CONSTANT' && isNode(a.value) ? a.value : undefined;
      if (v !== undefined && isNode(v.type) && v.type.id === 'VARCHAR' && typeof v.value === 'string' && wanted.has(v.value)) {
        if (seen.has(v.value)) return false;
        seen.add(v.value);
      }
      for (const x of Object.values(a)) stack.push(x);
    }
  }
  return seen.size === markers.length && tagged === markers.length;
}
