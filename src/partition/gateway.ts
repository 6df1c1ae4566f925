// What the HTTP edge asks of the partitions, as requests with one outcome each: accept an Invoke
// (or find the invocation its id already names), attach to an invocation, read its output, append
// a command for it. The ingress reaches partitions through this interface alone. Today it is
// answered in-process (`LocalGateway`, the statements the ingress ran itself before); partitions
// on other threads (issue 23) answer the same requests over a port, and a partition led by another
// node is refused with NotLedHereError, which the edge's routing forwards (forwarding.ts).
import type { InvocationId } from '../common/ids.js';
import type { CommandKind, Invoke } from '../log/commands.js';
import type { BacklogFull } from './flow-control.js';
import type { InvocationStatus } from './state.js';
import type { Worker } from './worker.js';

export interface InvokeRequest {
  id: InvocationId;
  /** Its id can exist already (a workflow run, an idempotent request): then no new invocation is made. */
  deterministic: boolean;
  /** Answered once durable, not with the result. */
  send: boolean;
  workflow_run: boolean;
  /** Flow control's scope: a full backlog refuses the request before anything is appended. */
  flow?: { scope: string; limit_key: string | undefined };
  invoke: Invoke;
}

export type InvokeOutcome =
  /** The call's result, or the result of the invocation its id named already. */
  | { kind: 'completed'; status: InvocationStatus }
  /** A send, durable. */
  | { kind: 'accepted' }
  /** A send whose id named an invocation already (durable too). */
  | { kind: 'previously_accepted' }
  /** A workflow's run handler invoked again for the same key. */
  | { kind: 'workflow_exists' }
  | { kind: 'backlog_full'; full: BacklogFull };

export type OutputOutcome = { kind: 'not_found' } | { kind: 'not_completed' } | { kind: 'completed'; status: InvocationStatus };

export interface PartitionGateway {
  /** A partition key of a partition served here (a plain service's call starts where it arrived). */
  anyKey(): bigint;
  invoke(req: InvokeRequest): Promise<InvokeOutcome>;
  /** Waits for the invocation's result; `undefined` for an invocation not known. */
  attach(id: InvocationId): Promise<InvocationStatus | undefined>;
  /** The result now, if there is one (durable). */
  output(id: InvocationId): Promise<OutputOutcome>;
  /** Appends a command for the invocation's partition; resolves once durable. */
  append(id: InvocationId, command: CommandKind): Promise<void>;
}

/** The partitions of this process's worker, asked in-process: the command is passed, never encoded. */
export class LocalGateway implements PartitionGateway {
  constructor(private readonly worker: Worker) {}

  anyKey(): bigint {
    return this.worker.localPartitionKey();
  }

  invoke(req: InvokeRequest): Promise<InvokeOutcome> {
    return acceptInvoke(this.worker, req);
  }

  // async: a partition led elsewhere is a rejection (the worker throws it at once), as over a port.
  async attach(id: InvocationId): Promise<InvocationStatus | undefined> {
    if (this.worker.invocation(id) === undefined) return undefined;
    return this.worker.awaitCompletion(id);
  }

  async output(id: InvocationId): Promise<OutputOutcome> {
    const status = this.worker.invocation(id);
    if (status === undefined) return { kind: 'not_found' };
    if (status.status !== 'completed') return { kind: 'not_completed' };
    await this.worker.durable(id); // the completion may be in the batch being written
    return { kind: 'completed', status };
  }

  async append(id: InvocationId, command: CommandKind): Promise<void> {
    return this.worker.append(id, command);
  }
}

/** One Invoke at the partition that owns its id: what became of it. */
export async function acceptInvoke(worker: Worker, req: InvokeRequest): Promise<InvokeOutcome> {
  const { id } = req;
  // Only workflow runs and idempotent requests have ids that can already exist.
  if (req.deterministic && worker.invocation(id) !== undefined) {
    // it may have been accepted by the batch being written: answer once that batch is durable
    await worker.durable(id);
    if (req.send) return { kind: 'previously_accepted' };
    if (req.workflow_run) return { kind: 'workflow_exists' };
    return { kind: 'completed', status: await worker.awaitCompletion(id) };
  }
  if (req.flow !== undefined) {
    // The ingress's clock: a quiet partition's last command may be long past, and a refusal appends nothing.
    const full = worker.partitionOf(id.partitionKey).state.flow.backlogFull(req.flow.scope, req.flow.limit_key ?? '', Date.now());
    if (full !== undefined) return { kind: 'backlog_full', full };
  }
  const command: CommandKind = { kind: 'invoke', invoke: req.invoke };
  if (req.send) {
    await worker.append(id, command);
    return { kind: 'accepted' };
  }
  // Wait before appending, so that a fast completion cannot slip past us.
  const wait = worker.waitFor(id, { fresh: true });
  wait.done.catch(() => undefined); // awaited below; a rejection while the append is refused goes nowhere
  try {
    await worker.append(id, command);
  } catch (err) {
    wait.stop(); // not accepted: nothing will complete this wait
    throw err;
  }
  return { kind: 'completed', status: await wait.done };
}
