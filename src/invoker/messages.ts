import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

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

const protoPath = fileURLToPath(new URL('../../proto/service_protocol.proto', import.meta.url));
const root = new protobuf.Root().loadSync(protoPath, { keepCase: true });
const t = (name: string): protobuf.Type => root.lookupType(`keel.sp.${name}`);

export const pb = {
  Start: t('StartMessage'),
  Suspension: t('SuspensionMessage'),
  Error: t('ErrorMessage'),
  End: t('EndMessage'),
  ProposeRunCompletion: t('ProposeRunCompletionMessage'),
  AwaitingOn: t('AwaitingOnMessage'),
  ProposeRunCompletionAck: t('ProposeRunCompletionAckMessage'),
  Notification: t('Notification'),
  Input: t('InputCommandMessage'),
  Output: t('OutputCommandMessage'),
  GetLazyState: t('GetLazyStateCommandMessage'),
  SetState: t('SetStateCommandMessage'),
  ClearState: t('ClearStateCommandMessage'),
  ClearAllState: t('ClearAllStateCommandMessage'),
  GetLazyStateKeys: t('GetLazyStateKeysCommandMessage'),
  GetEagerState: t('GetEagerStateCommandMessage'),
  GetEagerStateKeys: t('GetEagerStateKeysCommandMessage'),
  GetPromise: t('GetPromiseCommandMessage'),
  PeekPromise: t('PeekPromiseCommandMessage'),
  CompletePromise: t('CompletePromiseCommandMessage'),
  Sleep: t('SleepCommandMessage'),
  Call: t('CallCommandMessage'),
  OneWayCall: t('OneWayCallCommandMessage'),
  SendSignal: t('SendSignalCommandMessage'),
  Run: t('RunCommandMessage'),
  AttachInvocation: t('AttachInvocationCommandMessage'),
  GetInvocationOutput: t('GetInvocationOutputCommandMessage'),
  CompleteAwakeable: t('CompleteAwakeableCommandMessage'),
} as const;

/** The protobuf type of a command message id, for decoding journal entries. */
export const commandTypes: ReadonlyMap<number, protobuf.Type> = new Map([
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

export function encode(type: protobuf.Type, fields: Record<string, unknown>): Uint8Array {
  return type.encode(type.fromObject(fields)).finish();
}

const plain: protobuf.IConversionOptions = { longs: Number, bytes: Buffer, defaults: false, oneofs: true };

/** Decodes to a plain object: uint64 as number, bytes as Buffer, oneof names set. */
export function decode<T = any>(type: protobuf.Type, bytes: Uint8Array): T {
  return type.toObject(type.decode(bytes), plain) as T;
}

export interface FailureJson {
  code: number;
  message: string;
  metadata?: Array<{ key: string; value: string }>;
}
