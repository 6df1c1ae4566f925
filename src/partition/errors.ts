// Why a partition's request is answered elsewhere: the partition is led by another node, or moved
// to one while a client waited here. The edges' routing sends such requests on (forwarding.ts).
import { KeelError } from '../errors/index.js';

/** The partition is led by another node of the cluster: the request goes there (forwarding.ts). */
export class NotLedHereError extends KeelError {
  constructor(readonly partition: number) {
    super('KEEL0805', `partition ${partition} is led by another node of the cluster`);
  }
}

/** A client waited here for an invocation whose partition another node leads now: its result is to be had there (attach). */
export class PartitionMovedError extends KeelError {
  constructor(
    readonly partition: number,
    readonly invocation: string,
  ) {
    super('KEEL0805', `partition ${partition} moved to another node of the cluster while invocation ${invocation} was awaited here`);
  }
}
