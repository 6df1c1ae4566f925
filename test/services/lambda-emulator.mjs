// A local emulator of the AWS Lambda Invoke API (node:http), as the test recipe describes:
// POST /2015-03-31/functions/{FunctionName}/invocations, FunctionName = the URL-encoded ARN.
// Functions are registered by full ARN: either a Restate SDK Lambda handler
// (createEndpointHandler from @restatedev/restate-sdk/lambda) or any async (event) => result.
import http from 'node:http';

export async function startLambdaEmulator(t) {
  const functions = new Map();
  const faults = [];
  const emu = {
    calls: [],
    assumed: [],
    url: '',
    /** Registers `handler(event, context)` under a qualified ARN. */
    add(arn, handler) {
      functions.set(arn, handler);
    },
    /** The next n invocations answer with this HTTP status and x-amzn-errortype. */
    failNext(n, { status, type }) {
      for (let i = 0; i < n; i++) faults.push({ status, type });
    },
  };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const url = new URL(req.url, 'http://x');
      const m = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/.exec(url.pathname);
      const body = Buffer.concat(chunks);
      // STS AssumeRole (query protocol), for deployments with assume_role_arn.
      if (req.method === 'POST' && url.pathname === '/' && /Action=AssumeRole/.test(body.toString())) {
        const form = new URLSearchParams(body.toString());
        emu.assumed.push({ role: form.get('RoleArn'), session: form.get('RoleSessionName'), headers: req.headers });
        res.writeHead(200, { 'content-type': 'text/xml' });
        res.end(
          `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>` +
            `<Credentials><AccessKeyId>ASIAKEELTEST</AccessKeyId><SecretAccessKey>secret</SecretAccessKey>` +
            `<SessionToken>assumed-session-token</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials>` +
            `<AssumedRoleUser><Arn>${form.get('RoleArn')}/keel</Arn><AssumedRoleId>AROA:keel</AssumedRoleId></AssumedRoleUser>` +
            `</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>`,
        );
        return;
      }
      if (req.method !== 'POST' || !m) {
        res.writeHead(404, { 'x-amzn-errortype': 'UnknownOperationException' }).end('{"message":"unknown operation"}');
        return;
      }
      const fn = decodeURIComponent(m[1]);
      const qualifier = url.searchParams.get('Qualifier');
      let event;
      try {
        event = JSON.parse(body.toString('utf8'));
      } catch {
        event = undefined;
      }
      emu.calls.push({ fn, qualifier, headers: req.headers, size: body.length, event });
      const fault = faults.shift();
      if (fault) {
        res.writeHead(fault.status, { 'content-type': 'application/json', 'x-amzn-errortype': fault.type });
        res.end(JSON.stringify({ Type: 'User', message: `injected ${fault.type}` }));
        return;
      }
      if (body.length > 6 * 1024 * 1024) {
        res.writeHead(413, { 'content-type': 'application/json', 'x-amzn-errortype': 'RequestTooLargeException' });
        res.end(JSON.stringify({ Type: 'User', message: `Request must be smaller than 6291456 bytes for the InvokeFunction operation` }));
        return;
      }
      const handler = functions.get(fn);
      if (!handler) {
        res.writeHead(404, { 'content-type': 'application/json', 'x-amzn-errortype': 'ResourceNotFoundException' });
        res.end(JSON.stringify({ Type: 'User', message: `Function not found: ${fn}` }));
        return;
      }
      try {
        const result = await handler(event, { functionName: fn, awsRequestId: String(emu.calls.length) });
        res.writeHead(200, { 'content-type': 'application/json', 'x-amz-executed-version': fn.split(':')[7] ?? '$LATEST' });
        res.end(JSON.stringify(result ?? null));
      } catch (err) {
        res.writeHead(200, { 'content-type': 'application/json', 'x-amz-function-error': 'Unhandled' });
        res.end(JSON.stringify({ errorType: err?.name ?? 'Error', errorMessage: err?.message ?? String(err), trace: [] }));
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  emu.url = `http://127.0.0.1:${server.address().port}`;
  t.teardown(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return emu;
}

/** A function that answers discovery with a hand-written manifest (API-Gateway-like response). */
export function manifestFunction(manifest, { version = 4 } = {}) {
  return async (event) => {
    if (event.path === '/discover') {
      return {
        statusCode: 200,
        headers: { 'content-type': `application/vnd.restate.endpointmanifest.v${version}+json` },
        isBase64Encoded: true,
        body: Buffer.from(JSON.stringify(manifest)).toString('base64'),
      };
    }
    return { statusCode: 404, headers: {}, isBase64Encoded: false, body: 'not found' };
  };
}
