// Commands of Keel's partition logs, typed by the interfaces generated from proto/keel.proto.
import protobuf from 'protobufjs';
import { AttemptEnded_Outcome, AttemptEnded_Then, COMMAND_KINDS, descriptor, Manage_Action, PACKAGE, Schedule_Action, TimerFired_Kind } from './commands.gen.js';
import type { Command } from './commands.gen.js';

export type * from './commands.gen.js';
export { COMMAND_KINDS };

export const Outcome = AttemptEnded_Outcome;
export const Then = AttemptEnded_Then;
export const ManageAction = Manage_Action;
export const TimerKind = TimerFired_Kind;
export const ScheduleAction = Schedule_Action;

/** A result in the form commands carry it: exactly one of value, failure, void. */
export type ResultMsg = Pick<import('./commands.gen.js').CallResult, 'value' | 'failure' | 'void'>;

// Built on first use: reading the descriptor and resolving its types costs ~20 ms of CPU, paid
// at the first append or log read rather than at every start.
let commandType: protobuf.Type | undefined;
const CommandType = (): protobuf.Type => (commandType ??= protobuf.Root.fromJSON(descriptor as unknown as protobuf.INamespace).lookupType(`${PACKAGE}.Command`));

export function encodeCommand(cmd: Command): Buffer {
  // Commands are built to the generated types, so they encode as they are: fromObject (a copy
  // with conversions) cost as much as the encoding itself.
  const bytes = CommandType().encode(cmd).finish();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Decodes a log record; absent fields stay undefined (uint64 as number, bytes as Buffer). */
export function decodeCommand(bytes: Uint8Array): Command {
  const type = CommandType();
  const cmd = type.toObject(type.decode(bytes), { longs: Number, bytes: Buffer, defaults: false, oneofs: true }) as Command;
  if (!COMMAND_KINDS.includes(cmd.kind)) throw new Error(`log record without a known command kind (${String(cmd.kind)})`);
  return cmd;
}
