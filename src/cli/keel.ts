#!/usr/bin/env node
// The `keel` command-line client. `keel explain <CODE>` prints a catalogue entry.

import { catalogue, explain } from '../errors/index.js';

const USAGE = `usage: keel explain <CODE>     print the meaning and remedy of an error code (META0003, RT0001, ...)
       keel explain --list     list every code`;

function wrap(text: string, indent: string, width = 88): string {
  const words = text.split(/\s+/).filter(Boolean);
  const lines: string[] = [];
  let line = '';
  for (const w of words) {
    if (line && line.length + 1 + w.length > width - indent.length) {
      lines.push(line);
      line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  if (line) lines.push(line);
  return lines.map((l) => indent + l).join('\n');
}

export function main(argv: string[]): number {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === '-h' || cmd === '--help' || cmd === 'help') {
    process.stdout.write(USAGE + '\n');
    return cmd === undefined ? 2 : 0;
  }
  if (cmd !== 'explain') {
    process.stderr.write(`keel: unknown command '${cmd}'\n${USAGE}\n`);
    return 2;
  }
  const code = rest[0];
  if (code === '--list') {
    for (const e of catalogue.values()) process.stdout.write(`${e.code.padEnd(9)} ${e.title}\n`);
    return 0;
  }
  if (code === undefined || rest.length > 1) {
    process.stderr.write(`keel explain: expected exactly one error code\n${USAGE}\n`);
    return 2;
  }
  const entry = explain(code.trim());
  if (!entry) {
    process.stderr.write(
      `keel explain: unknown error code '${code}'. Codes look like META0003 or RT0001; run 'keel explain --list' to see them all.\n`,
    );
    return 2;
  }
  process.stdout.write(
    `${entry.code}: ${entry.title}\n\n` +
      `Condition:\n${wrap(entry.condition, '  ')}\n\n` +
      `Remedy:\n${wrap(entry.remedy, '  ')}\n`,
  );
  return 0;
}

process.exitCode = main(process.argv.slice(2));
