// Request identity v1, as Restate signs requests to service endpoints: an ed25519 JWT in
// `x-restate-jwt-v1` with `x-restate-signature-scheme: v1`, audience = the request path, valid
// `expiration` either side of its issue time. SDKs given `identityKeys` verify it against the
// public key `publickeyv1_<base58>` that the server logs at startup.
//
// Signing costs 100-200 µs, a good part of an invocation's CPU: one token per path is signed and
// reused for half its validity. Restate 1.7 also puts the object key in an optional `sub`; no
// SDK checks it (older Restate versions never sent it), and with it every key would need its own
// signature, so Keel leaves it out.
import { createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Config } from '../config/index.js';
import { KeelError } from '../errors/index.js';

export const SIGNATURE_SCHEME_HEADER = 'x-restate-signature-scheme';
export const JWT_HEADER = 'x-restate-jwt-v1';

/** Paths whose token is kept: bounded by the registered handlers, and past this the oldest go. */
const MAX_CACHED_TOKENS = 10_000;

interface Cached {
  jwt: string;
  /** Signed again after this: half of the token's validity is left. */
  renew_at_s: number;
}

const BASE58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** Bitcoin-alphabet base58 of a short byte string (a 32-byte public key). */
export function base58(bytes: Uint8Array): string {
  const digits: number[] = [];
  for (const byte of bytes) {
    let carry = byte;
    for (let i = 0; i < digits.length; i++) {
      carry += digits[i]! << 8;
      digits[i] = carry % 58;
      carry = Math.floor(carry / 58);
    }
    for (; carry > 0; carry = Math.floor(carry / 58)) digits.push(carry % 58);
  }
  let out = '';
  for (const byte of bytes) {
    if (byte !== 0) break;
    out += '1';
  }
  for (let i = digits.length - 1; i >= 0; i--) out += BASE58[digits[i]!];
  return out;
}

function b64url(data: string | Buffer): string {
  return Buffer.from(data).toString('base64url');
}

function readKey(file: string): KeyObject {
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (err) {
    throw new KeelError('RT0002', `key 'worker.invoker.request_identity_private_key_pem_file': cannot read ${file}: ${(err as Error).message}`);
  }
  const blocks = pem.match(/-----BEGIN [A-Z ]+-----/g) ?? [];
  if (blocks.length !== 1) {
    throw new KeelError('RT0002', `key 'worker.invoker.request_identity_private_key_pem_file': ${file} must hold exactly one PEM private key, found ${blocks.length} PEM blocks`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch (err) {
    throw new KeelError('RT0002', `key 'worker.invoker.request_identity_private_key_pem_file': ${file} is not a PEM private key: ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new KeelError(
      'RT0002',
      `key 'worker.invoker.request_identity_private_key_pem_file': ${file} holds a ${key.asymmetricKeyType ?? 'symmetric'} key; an ed25519 key is required (openssl genpkey -algorithm ed25519)`,
    );
  }
  return key;
}

/** Signs requests to endpoints; the token of a path is reused for half its validity. */
export class RequestSigner {
  /** `publickeyv1_…`: what endpoints list in their `identityKeys`. */
  readonly publicKey: string;
  private readonly header: string;
  private readonly cache = new Map<string, Cached>();

  private constructor(
    private readonly key: KeyObject,
    private readonly expiration_s: number,
  ) {
    const jwk = createPublicKey(key).export({ format: 'jwk' });
    this.publicKey = `publickeyv1_${base58(Buffer.from(jwk.x ?? '', 'base64url'))}`;
    this.header = b64url(JSON.stringify({ typ: 'JWT', alg: 'EdDSA', kid: this.publicKey }));
  }

  /** Loads the PEM file; RT0002 when it cannot be read or is not one ed25519 private key. */
  static fromPemFile(file: string, expiration_ms: number): RequestSigner {
    // A token valid for less than a second either side would fail on any clock skew.
    return new RequestSigner(readKey(file), Math.max(1, Math.floor(expiration_ms / 1000)));
  }

  /** The identity headers for a request to `path` (the URL path, as the endpoint sees it). */
  headers(path: string, now_ms = Date.now()): Record<string, string> {
    return { [SIGNATURE_SCHEME_HEADER]: 'v1', [JWT_HEADER]: this.token(path, Math.floor(now_ms / 1000)) };
  }

  private token(path: string, now_s: number): string {
    const hit = this.cache.get(path);
    if (hit !== undefined && now_s < hit.renew_at_s) return hit.jwt;
    const claims = { aud: path, exp: now_s + this.expiration_s, iat: now_s, nbf: now_s - this.expiration_s };
    const input = `${this.header}.${b64url(JSON.stringify(claims))}`;
    const jwt = `${input}.${b64url(sign(null, Buffer.from(input), this.key))}`;
    if (hit === undefined && this.cache.size >= MAX_CACHED_TOKENS) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(path, { jwt, renew_at_s: now_s + Math.max(1, Math.floor(this.expiration_s / 2)) });
    return jwt;
  }
}

/** The request signer the configuration names (worker.invoker.request_identity_private_key_pem_file), if any. */
export function signerFor(config: Config): RequestSigner | undefined {
  const file = config.worker.invoker.request_identity_private_key_pem_file;
  return file === undefined ? undefined : RequestSigner.fromPemFile(file, config.worker.invoker.request_identity_expiration_ms);
}
