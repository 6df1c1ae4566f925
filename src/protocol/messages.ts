import protobuf from 'protobufjs';
import { descriptor, PACKAGE } from './messages.gen.js';
import type * as M from './messages.gen.js';

export type * from './messages.gen.js';

// Message type ids of the service protocol (16-bit type field of the frame header).
export const MessageType = {
  Start: 0x0000,
  Suspension: 0x0001,
  Error: 0x0002,
  End: 0x0003,
  ProposeRunCompletion: 0x0005,
  AwaitingOn: 0x0006,
  ProposeRunCompletionAck: 0x0007,
  InputCommand: 0x0400,
  OutputCommand: 0x0401,
  GetLazyStateCommand: 0x0402,
  SetStateCommand: 0x0403,
  ClearStateCommand: 0x0404,
  ClearAllStateCommand: 0x0405,
  GetLazyStateKeysCommand: 0x0406,
  GetEagerStateCommand: 0x0407,
  GetEagerStateKeysCommand: 0x0408,
  GetPromiseCommand: 0x0409,
  PeekPromiseCommand: 0x040a,
  CompletePromiseCommand: 0x040b,
  SleepCommand: 0x040c,
  CallCommand: 0x040d,
  OneWayCallCommand: 0x040e,
  SendSignalCommand: 0x0410,
  RunCommand: 0x0411,
  AttachInvocationCommand: 0x0412,
  GetInvocationOutputCommand: 0x0413,
  CompleteAwakeableCommand: 0x0414,
  GetLazyStateCompletion: 0x8002,
  GetLazyStateKeysCompletion: 0x8006,
  GetPromiseCompletion: 0x8009,
  PeekPromiseCompletion: 0x800a,
  CompletePromiseCompletion: 0x800b,
  SleepCompletion: 0x800c,
  CallCompletion: 0x800d,
  CallInvocationIdCompletion: 0x800e,
  RunCompletion: 0x8011,
  AttachInvocationCompletion: 0x8012,
  GetInvocationOutputCompletion: 0x8013,
  SignalNotification: 0xfbff,
} as const;

export const REQUESTED_ACK_FLAG = 0x8000;

export function isNotification(type: number): boolean {
  return type >= 0x8000 && type < 0xfc00;
}

export function isCustomEntry(type: number): boolean {
  return type >= 0xfc00;
}

const typeNames = new Map<number, string>(Object.entries(MessageType).map(([k, v]) => [v, k]));

/** `Command: Run`-style names, as sys_journal.entry_type shows them. */
export function entryTypeName(type: number): string {
  const name = typeNames.get(type);
  if (name === undefined) return isCustomEntry(type) ? `Custom: 0x${type.toString(16)}` : `0x${type.toString(16)}`;
  if (name.endsWith('Command')) return `Command: ${name.slice(0, -'Command'.length)}`;
  if (isNotification(type)) return `Notification: ${name.replace(/Completion$/, '')}`;
  return name;
}

// Built on first use (see `codec`): reading the descriptor and resolving its types costs tens of
// ms of CPU, which a start that decodes no message does not pay.
let root: protobuf.Root | undefined;
const protocolRoot = (): protobuf.Root => (root ??= protobuf.Root.fromJSON(descriptor as unknown as protobuf.INamespace));

/** Decoding as Keel reads messages: uint64 as number, bytes as Buffer, oneof names set. */
const plain: protobuf.IConversionOptions = { longs: Number, bytes: Buffer, defaults: false, oneofs: true };

/** Encoder and decoder of one protocol message, typed by the generated interface. */
export interface Codec<T> {
  readonly name: string;
  encode(value: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}

function codec<T>(name: string): Codec<T> {
  let type: protobuf.Type | undefined;
  const resolved = (): protobuf.Type => (type ??= protocolRoot().lookupType(`${PACKAGE}.${name}`));
  return {
    name,
    // Values are built to the generated types: no fromObject copy before encoding.
    encode: (value) => resolved().encode(value as { [k: string]: unknown }).finish(),
    decode: (bytes) => {
      const t = resolved();
      return t.toObject(t.decode(bytes), plain) as T;
    },
  };
}

export const pb = {
  Start: codec<M.StartMessage>('StartMessage'),
  Suspension: codec<M.SuspensionMessage>('SuspensionMessage'),
  Error: codec<M.ErrorMessage>('ErrorMessage'),
  End: codec<M.EndMessage>('EndMessage'),
  ProposeRunCompletion: codec<M.ProposeRunCompletionMessage>('ProposeRunCompletionMessage'),
  AwaitingOn: codec<M.AwaitingOnMessage>('AwaitingOnMessage'),
  ProposeRunCompletionAck: codec<M.ProposeRunCompletionAckMessage>('ProposeRunCompletionAckMessage'),
  Notification: codec<M.Notification>('Notification'),
  Input: codec<M.InputCommandMessage>('InputCommandMessage'),
  Output: codec<M.OutputCommandMessage>('OutputCommandMessage'),
  GetLazyState: codec<M.GetLazyStateCommandMessage>('GetLazyStateCommandMessage'),
  SetState: codec<M.SetStateCommandMessage>('SetStateCommandMessage'),
  ClearState: codec<M.ClearStateCommandMessage>('ClearStateCommandMessage'),
  ClearAllState: codec<M.ClearAllStateCommandMessage>('ClearAllStateCommandMessage'),
  GetLazyStateKeys: codec<M.GetLazyStateKeysCommandMessage>('GetLazyStateKeysCommandMessage'),
  GetEagerState: codec<M.GetEagerStateCommandMessage>('GetEagerStateCommandMessage'),
  GetEagerStateKeys: codec<M.GetEagerStateKeysCommandMessage>('GetEagerStateKeysCommandMessage'),
  GetPromise: codec<M.GetPromiseCommandMessage>('GetPromiseCommandMessage'),
  PeekPromise: codec<M.PeekPromiseCommandMessage>('PeekPromiseCommandMessage'),
  CompletePromise: codec<M.CompletePromiseCommandMessage>('CompletePromiseCommandMessage'),
  Sleep: codec<M.SleepCommandMessage>('SleepCommandMessage'),
  Call: codec<M.CallCommandMessage>('CallCommandMessage'),
  OneWayCall: codec<M.OneWayCallCommandMessage>('OneWayCallCommandMessage'),
  SendSignal: codec<M.SendSignalCommandMessage>('SendSignalCommandMessage'),
  Run: codec<M.RunCommandMessage>('RunCommandMessage'),
  AttachInvocation: codec<M.AttachInvocationCommandMessage>('AttachInvocationCommandMessage'),
  GetInvocationOutput: codec<M.GetInvocationOutputCommandMessage>('GetInvocationOutputCommandMessage'),
  CompleteAwakeable: codec<M.CompleteAwakeableCommandMessage>('CompleteAwakeableCommandMessage'),
} as const;

/** What the journal views read of any command: its name and the completion it waits for. */
export interface CommandFields {
  name?: string;
  result_completion_id?: number;
}

/** The codec of a command message id, for reading journal entries. */
export const commandTypes: ReadonlyMap<number, Codec<CommandFields>> = new Map<number, Codec<CommandFields>>([
  [MessageType.InputCommand, pb.Input],
  [MessageType.OutputCommand, pb.Output],
  [MessageType.GetLazyStateCommand, pb.GetLazyState],
  [MessageType.SetStateCommand, pb.SetState],
  [MessageType.ClearStateCommand, pb.ClearState],
  [MessageType.ClearAllStateCommand, pb.ClearAllState],
  [MessageType.GetLazyStateKeysCommand, pb.GetLazyStateKeys],
  [MessageType.GetEagerStateCommand, pb.GetEagerState],
  [MessageType.GetEagerStateKeysCommand, pb.GetEagerStateKeys],
  [MessageType.GetPromiseCommand, pb.GetPromise],
  [MessageType.PeekPromiseCommand, pb.PeekPromise],
  [MessageType.CompletePromiseCommand, pb.CompletePromise],
  [MessageType.SleepCommand, pb.Sleep],
  [MessageType.CallCommand, pb.Call],
  [MessageType.OneWayCallCommand, pb.OneWayCall],
  [MessageType.SendSignalCommand, pb.SendSignal],
  [MessageType.RunCommand, pb.Run],
  [MessageType.AttachInvocationCommand, pb.AttachInvocation],
  [MessageType.GetInvocationOutputCommand, pb.GetInvocationOutput],
  [MessageType.CompleteAwakeableCommand, pb.CompleteAwakeable],
]);

export function encode<T>(codec: Codec<T>, value: T): Uint8Array {
  return codec.encode(value);
}

export function decode<T>(codec: Codec<T>, bytes: Uint8Array): T {
  return codec.decode(bytes);
}


