import type { Command } from 'commander';
import type { Ctx } from '../context.js';

/** Builds the context of a command from its options and the global ones. */
export type CtxFactory = (cmd: Command) => Ctx;
