// A small OTLP/HTTP trace receiver for tests: accepts POST /v1/traces in protobuf (what Keel's
// exporter sends), decodes each ExportTraceServiceRequest with the OTLP schema below and keeps
// the spans with hex ids, names, kinds, times and attributes.
import http from 'node:http';
import protobuf from 'protobufjs';

// The part of opentelemetry/proto/collector/trace/v1 and trace/v1 the tests read (field numbers
// as the OTLP specification defines them).
const SCHEMA = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
message InstrumentationScope { string name = 1; string version = 2; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  string name = 5;
  int32 kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  Status status = 15;
  fixed32 flags = 16;
}
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  oneof value { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4; }
}
`;

const Request = protobuf.parse(SCHEMA, { keepCase: true }).root.lookupType('otlp.ExportTraceServiceRequest');

export const SpanKind = { INTERNAL: 1, SERVER: 2, CLIENT: 3 };

function attributes(list = []) {
  const out = {};
  for (const { key, value = {} } of list) out[key] = value.string_value ?? value.bool_value ?? (value.int_value !== undefined ? Number(value.int_value) : value.double_value);
  return out;
}

/** Starts the receiver on a free loopback port; `t.teardown` closes it. */
export async function startOtlpReceiver(t) {
  const receiver = { spans: [], requests: [], url: '' };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      receiver.requests.push({ method: req.method, path: req.url, contentType: req.headers['content-type'] });
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const decoded = Request.toObject(Request.decode(Buffer.concat(chunks)), { longs: String, bytes: Buffer, defaults: false });
      for (const rs of decoded.resource_spans ?? []) {
        const resource = attributes(rs.resource?.attributes);
        for (const ss of rs.scope_spans ?? []) {
          for (const s of ss.spans ?? []) {
            receiver.spans.push({
              traceId: s.trace_id.toString('hex'),
              spanId: s.span_id.toString('hex'),
              parentSpanId: s.parent_span_id?.length ? s.parent_span_id.toString('hex') : undefined,
              name: s.name,
              kind: s.kind,
              start_ms: Number(BigInt(s.start_time_unix_nano) / 1_000_000n),
              end_ms: Number(BigInt(s.end_time_unix_nano) / 1_000_000n),
              attributes: attributes(s.attributes),
              status: s.status ?? {},
              resource,
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${server.address().port}`;
  t.teardown(() => new Promise((resolve) => server.close(() => resolve())));
  return receiver;
}
