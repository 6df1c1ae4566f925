// keel explain <CODE> | --list

import type { Command } from 'commander';
import { catalogue, explain } from '../../errors/index.js';
import { usage } from '../errors.js';

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

export function explainCommand(program: Command): void {
  program
    .command('explain')
    .argument('[code]', 'error code (META0003, RT0016, ...)')
    .option('--list', 'list every code')
    .description('print the meaning and remedy of an error code')
    .action((code: string | undefined, o: { list?: boolean }) => {
      if (o.list) {
        for (const e of catalogue.values()) process.stdout.write(`${e.code.padEnd(9)} ${e.title}\n`);
        return;
      }
      if (code === undefined) throw usage('explain: expected exactly one error code (or --list)');
      const entry = explain(code.trim());
      if (!entry) {
        throw usage(`explain: unknown error code '${code}'. Codes look like META0003 or RT0001; run 'keel explain --list' to see them all.`);
      }
      process.stdout.write(
        `${entry.code}: ${entry.title}\n\n` + `Condition:\n${wrap(entry.condition, '  ')}\n\n` + `Remedy:\n${wrap(entry.remedy, '  ')}\n`,
      );
    });
}
