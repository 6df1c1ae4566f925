import { KeelError } from '../errors/index.js';

// Each protocol message is an 8-byte header (type u16, flags u16, length u32, big-endian)
// followed by the protobuf payload.

export interface Frame {
  type: number;
  flags: number;
  payload: Uint8Array;
}

export const HEADER_BYTES = 8;

export function encodeFrame(type: number, payload: Uint8Array, flags = 0): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  out.writeUInt16BE(type, 0);
  out.writeUInt16BE(flags, 2);
  out.writeUInt32BE(payload.length, 4);
  out.set(payload, HEADER_BYTES);
  return out;
}

/**
 * Incremental decoder for a byte stream. The size limit is checked against the length in the
 * header, before the body is buffered, so an oversized message costs no memory (RT0003).
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered_bytes = 0;

  constructor(private readonly message_size_limit_bytes: number) {}

  /** Feeds bytes; returns every complete frame. Throws KeelError RT0003 on an oversized frame. */
  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.buffered_bytes += chunk.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.buffered_bytes < HEADER_BYTES) break;
      const head = this.peek(HEADER_BYTES);
      const length = head.readUInt32BE(4);
      if (length > this.message_size_limit_bytes) {
        throw new KeelError(
          'RT0003',
          `message of type 0x${head.readUInt16BE(0).toString(16)} is ${length} bytes, over worker.invoker.message_size_limit (${this.message_size_limit_bytes} bytes)`,
        );
      }
      if (this.buffered_bytes < HEADER_BYTES + length) break;
      const whole = this.take(HEADER_BYTES + length);
      frames.push({ type: whole.readUInt16BE(0), flags: whole.readUInt16BE(2), payload: whole.subarray(HEADER_BYTES) });
    }
    return frames;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length >= n) return this.chunks[0]!;
    const merged = Buffer.concat(this.chunks);
    this.chunks = [merged];
    return merged;
  }

  private take(n: number): Buffer {
    const first = this.peek(n);
    const out = first.subarray(0, n);
    const rest = first.subarray(n);
    if (rest.length > 0) this.chunks[0] = rest;
    else this.chunks.shift();
    this.buffered_bytes -= n;
    return out;
  }
}
