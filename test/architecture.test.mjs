// The layering of src/ (DESIGN.md): every import points down, no file imports itself back
// through a cycle, and the core folders have no `any`.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src');

/**
 * Folders from the bottom up: a folder may import only folders before it. `server` is
 * src/server.ts and src/main.ts. The browser app (src/ui) is not part of the server.
 */
const LAYERS = ['common', 'errors', 'config', 'telemetry', 'protocol', 'storage', 'endpoint', 'log', 'metadata', 'partition', 'invoker', 'subscriptions', 'ingress', 'admin', 'threads', 'cli', 'server'];
const CORE = ['common', 'errors', 'config', 'telemetry', 'protocol', 'storage', 'endpoint', 'log', 'metadata', 'partition', 'invoker', 'subscriptions'];

function sourceFiles(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (p !== path.join(SRC, 'ui')) out.push(...sourceFiles(p));
    } else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const folderOf = (file) => {
  const rel = path.relative(SRC, file).split(path.sep);
  return rel.length === 1 ? 'server' : rel[0];
};

/** Relative imports of a file (static, dynamic and type-only), resolved to .ts files. */
function importsOf(file) {
  const text = fs.readFileSync(file, 'utf8');
  const out = [];
  for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)) {
    out.push(path.resolve(path.dirname(file), m[1]).replace(/\.js$/, '.ts'));
  }
  return out;
}

const files = sourceFiles(SRC);
const graph = new Map(files.map((f) => [f, importsOf(f).filter((i) => files.includes(i))]));

t.test('every folder is a known layer', async (t) => {
  const unknown = [...new Set(files.map(folderOf))].filter((f) => !LAYERS.includes(f));
  t.same(unknown, [], 'add new folders to LAYERS in their place');
});

t.test('imports point down the layers, never up or sideways', async (t) => {
  const wrong = [];
  for (const [file, imports] of graph) {
    const from = folderOf(file);
    for (const target of imports) {
      const to = folderOf(target);
      if (to !== from && LAYERS.indexOf(to) >= LAYERS.indexOf(from)) {
        wrong.push(`${path.relative(SRC, file)} (${from}) imports ${path.relative(SRC, target)} (${to})`);
      }
    }
  }
  t.same(wrong, []);
});

/** Strongly connected components of more than one file (Tarjan): each one is a cycle. */
function cycles(g) {
  let index = 0;
  const stack = [];
  const on = new Set();
  const idx = new Map();
  const low = new Map();
  const out = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (g.get(v) ?? []).includes(v)) out.push(scc);
    }
  };
  for (const v of g.keys()) if (!idx.has(v)) visit(v);
  return out;
}

t.test('no import cycle between files', async (t) => {
  t.same(cycles(graph).map((c) => c.map((f) => path.relative(SRC, f)).sort()), []);
});

t.test('no import cycle between folders', async (t) => {
  const folders = new Map();
  for (const [file, imports] of graph) {
    const from = folderOf(file);
    const set = folders.get(from) ?? new Set();
    for (const i of imports) if (folderOf(i) !== from) set.add(folderOf(i));
    folders.set(from, set);
  }
  t.same(cycles(new Map([...folders].map(([k, v]) => [k, [...v]]))), []);
});

t.test('no `any` in the core folders', async (t) => {
  const found = [];
  for (const file of files) {
    if (!CORE.includes(folderOf(file)) || file.endsWith('.gen.ts')) continue;
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    lines.forEach((line, i) => {
      const code = line.replace(/\/\/.*$/, '').replace(/'(?:[^'\\]|\\.)*'|`(?:[^`\\]|\\.)*`/g, "''");
      if (/(:\s*any\b|\bas\s+any\b|<any\b|\bany\[\]|,\s*any>)/.test(code)) found.push(`${path.relative(SRC, file)}:${i + 1}: ${line.trim()}`);
    });
  }
  t.same(found, []);
});

/**
 * What a folder may import of another: the edge asks partitions through PartitionGateway
 * (partition/gateway.ts), so that partitions on other threads or nodes can answer it (issue 23);
 * of the partition folder it sees that, the errors it answers with, and the status type.
 */
const SEAMS = [{ folder: 'ingress', of: 'partition', only: ['partition/gateway.ts', 'partition/errors.ts', 'partition/state.ts'] }];

function seamBreaches(g) {
  const found = [];
  for (const [file, imports] of g) {
    for (const s of SEAMS) {
      if (folderOf(file) !== s.folder) continue;
      for (const i of imports) {
        const rel = path.relative(SRC, i);
        if (folderOf(i) === s.of && !s.only.includes(rel)) found.push(`${path.relative(SRC, file)} imports ${rel}: ${s.folder}/ sees only ${s.only.join(', ')}`);
      }
    }
  }
  return found;
}

t.test('the ingress reaches partitions through the gateway only', async (t) => {
  t.same(seamBreaches(graph), []);
});

/** The top-level arguments of each call of `callee` in `text` (strings, templates and nested calls skipped over). */
function callArguments(text, callee) {
  const calls = [];
  for (let at = text.indexOf(callee); at !== -1; at = text.indexOf(callee, at + 1)) {
    const args = [];
    let depth = 0;
    let start = at + callee.length;
    const stack = [];
    for (let i = start; i < text.length; i++) {
      const c = text[i];
      const inString = stack.at(-1);
      if (inString === "'" || inString === '"' || inString === '`') {
        if (c === '\\') i++;
        else if (c === inString) stack.pop();
        else if (inString === '`' && c === '$' && text[i + 1] === '{') (stack.push('${'), i++);
        continue;
      }
      if (c === "'" || c === '"' || c === '`') stack.push(c);
      else if (c === '(' || c === '[' || c === '{') (stack.push(c), depth++);
      else if (c === '}' && inString === '${') stack.pop();
      else if (c === ')' || c === ']' || c === '}') {
        stack.pop();
        if (--depth < 0) {
          args.push(text.slice(start, i).trim());
          break;
        }
      } else if (c === ',' && depth === 0) {
        args.push(text.slice(start, i).trim());
        start = i + 1;
      }
    }
    calls.push({ line: text.slice(0, at).split('\n').length, args });
  }
  return calls;
}

/**
 * Where a status is named at a throw site (fastify lib/errors.js: every error declared once, with
 * its code, message and status): a KeelError or an ingress error given a status literal, or a
 * reply sent with an error status literal. The catalogue (src/errors/catalogue.ts) gives the status.
 */
function statusesNamed(file, text) {
  const rel = path.relative(SRC, file);
  const found = [];
  for (const { line, args } of callArguments(text, 'new KeelError(')) if (/^\d{3}$/.test(args[2] ?? '')) found.push(`${rel}:${line}: new KeelError(${args[0]}, ..., ${args[2]})`);
  for (const { line, args } of callArguments(text, 'ingressError(')) if (/^\d{3}$/.test(args[3] ?? '')) found.push(`${rel}:${line}: ingressError(..., ${args[1]}, ..., ${args[3]})`);
  text.split('\n').forEach((l, i) => {
    // Restate's router answers a method a route lacks with a bare 405 and an allow header: no error, no code.
    if (/\.(code|status)\((4|5)\d\d\)/.test(l) && !/status\(405\)\.header\('allow'/.test(l)) found.push(`${rel}:${i + 1}: ${l.trim()}`);
  });
  return found;
}

t.test('throw sites name the error, never a status: the catalogue gives it', async (t) => {
  t.same(files.flatMap((f) => statusesNamed(f, fs.readFileSync(f, 'utf8'))), []);
});

t.test('the checks can fail', async (t) => {
  t.same(seamBreaches(new Map([[path.join(SRC, 'ingress/x.ts'), [path.join(SRC, 'partition/worker.ts'), path.join(SRC, 'partition/gateway.ts')]]])), ['ingress/x.ts imports partition/worker.ts: ingress/ sees only partition/gateway.ts, partition/errors.ts, partition/state.ts'], 'an edge file importing the worker is caught, the gateway is not');
  // A two-file cycle and an upward import, built in memory, are caught.
  const a = path.join(SRC, 'partition/a.ts');
  const b = path.join(SRC, 'partition/b.ts');
  t.equal(cycles(new Map([[a, [b]], [b, [a]]])).length, 1);
  t.ok(LAYERS.indexOf('invoker') > LAYERS.indexOf('partition'), 'partition importing the invoker would point up');
  const thrower = path.join(SRC, 'admin/x.ts');
  t.same(statusesNamed(thrower, "throw new KeelError('KEEL0004', `no ${f(a, b)} here`, 404, { cause });\nreply.status(409).send(x);\nnew KeelError('KEEL0004', 'fine');"), [
    "admin/x.ts:1: new KeelError('KEEL0004', ..., 404)",
    'admin/x.ts:2: reply.status(409).send(x);',
  ], 'a status named at a throw site is caught, a code alone is not');
  t.same(statusesNamed(thrower, "return ingressError(reply, 'RT0020',\n  `m ${x}`, 400);"), ["admin/x.ts:1: ingressError(..., 'RT0020', ..., 400)"]);
});
