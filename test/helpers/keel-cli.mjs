// Runs the `keel` CLI (dist/cli/keel.js) as a user does: a separate process, on the machine's
// own Node (20 here) when there is one outside node_modules, else the test's Node. Also a tmux
// pane for the interactive parts (prompts, spinner, colours).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const bin = path.join(root, 'dist/cli/keel.js');

/** The first `node` on PATH that is not the pinned one from node_modules. */
export function systemNode() {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir || dir.includes('node_modules')) continue;
    const p = path.join(dir, 'node');
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {}
  }
  return process.execPath;
}

export const cliNode = systemNode();

/** The environment the CLI runs in: no colour settings, no CI, only what a test gives. */
export function cliEnv(extra = {}) {
  return { PATH: `${path.dirname(cliNode)}${path.delimiter}/usr/bin${path.delimiter}/bin`, HOME: process.env.HOME ?? '/root', ...extra };
}

/**
 * Runs keel with `args` (asynchronously: the SDK services answering discovery live in this
 * process). Resolves { code, out, err, json } (json: stdout parsed when it parses).
 */
export function keelCli(args, { admin, env = {}, input } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cliNode, [bin, ...args], {
      env: cliEnv({ ...(admin ? { KEEL_ADMIN_URL: admin } : {}), ...env }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => {
      let json;
      try {
        json = JSON.parse(out);
      } catch {}
      resolve({ code, out, err, json });
    });
    child.stdin.end(input ?? '');
  });
}

const ESC = /\x1b\[/;
export const hasEscapes = (s) => ESC.test(s);

/**
 * A shell in a detached tmux session on a private socket, 200×50. `run(line)` types a line and
 * Enter; `screen({ escapes })` is what the terminal shows (with SGR codes when escapes).
 */
export async function tmuxShell(t, env) {
  const socket = `keel-cli-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const tm = (...args) => execFileSync('tmux', ['-L', socket, ...args], { encoding: 'utf8' });
  const envArgs = Object.entries(cliEnv({ TERM: 'xterm-256color', ...env })).map(([k, v]) => `${k}=${v}`);
  tm('-f', '/dev/null', 'new-session', '-d', '-s', 'main', '-x', '200', '-y', '50', 'env', '-i', ...envArgs, 'bash', '--norc', '--noprofile');
  t.teardown(() => {
    try {
      tm('kill-server');
    } catch {}
  });
  const shell = {
    keys(...keys) {
      tm('send-keys', '-t', 'main', ...keys);
    },
    type(text) {
      tm('send-keys', '-t', 'main', '-l', text);
    },
    run(line) {
      shell.type(line);
      shell.keys('Enter');
    },
    screen({ escapes = false } = {}) {
      return tm('capture-pane', '-p', '-t', 'main', '-S', '-2000', ...(escapes ? ['-e'] : []));
    },
    clear() {
      shell.run('clear');
      tm('clear-history', '-t', 'main');
    },
    /** Waits until the screen matches `re`; returns the screen. */
    async waitFor(re, { timeout_ms = 15_000, escapes = false } = {}) {
      const deadline = Date.now() + timeout_ms;
      for (;;) {
        const s = shell.screen({ escapes });
        if (re.test(s)) return s;
        if (Date.now() > deadline) throw new Error(`screen never matched ${re}:\n${s}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
  shell.run(`PS1='$ '`);
  await shell.waitFor(/^\$ ?$/m);
  return shell;
}
