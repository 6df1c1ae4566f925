// The service protocol versions this server speaks, and the discovery manifests it reads:
// the one definition that discovery, the invoker and the ingress share.

/** Service protocol versions (`application/vnd.restate.invocation.vN`) Keel speaks. */
export const MIN_SERVICE_PROTOCOL_VERSION = 5;
export const MAX_SERVICE_PROTOCOL_VERSION = 7;

/** Discovery manifest versions Keel reads, preferred first. */
export const MANIFEST_VERSIONS = [4, 3, 2, 1] as const;

export const MANIFEST_ACCEPT = MANIFEST_VERSIONS.map((v) => `application/vnd.restate.endpointmanifest.v${v}+json`).join(', ');

export function invocationContentType(version: number): string {
  return `application/vnd.restate.invocation.v${version}`;
}

/** Whether a protocol version range, as an endpoint announces it, overlaps Keel's. */
export function overlapsSupported(min: number, max: number): boolean {
  return min <= MAX_SERVICE_PROTOCOL_VERSION && max >= MIN_SERVICE_PROTOCOL_VERSION;
}
