// PostgreSQL backend messages Keel writes itself (pg-gateway writes those of startup and
// authentication). https://www.postgresql.org/docs/current/protocol-message-formats.html

/** One message: type byte, int32 length (itself included), body. */
export function message(type: string, body: Buffer = Buffer.alloc(0)): Buffer {
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = type.charCodeAt(0);
  out.writeInt32BE(4 + body.length, 1);
  body.copy(out, 5);
  return out;
}

export const cstring = (text: string): Buffer => Buffer.concat([Buffer.from(text, 'utf8'), Buffer.alloc(1)]);

/** Type OIDs of pg_type for the kinds of columns Keel answers with. */
export const PG_TYPE = {
  bool: 16, bytea: 17, int8: 20, int2: 21, int4: 23, text: 25, float4: 700, float8: 701, date: 1082, timestamptz: 1184, numeric: 1700,
} as const;

export function rowDescription(columns: ReadonlyArray<{ name: string; oid: number }>): Buffer {
  const parts: Buffer[] = [Buffer.alloc(2)];
  parts[0]!.writeInt16BE(columns.length);
  for (const c of columns) {
    const field = Buffer.alloc(18);
    field.writeInt32BE(0, 0); // table oid
    field.writeInt16BE(0, 4); // column number
    field.writeInt32BE(c.oid, 6);
    field.writeInt16BE(-1, 10); // type size: variable
    field.writeInt32BE(-1, 12); // type modifier
    field.writeInt16BE(0, 16); // text format
    parts.push(cstring(c.name), field);
  }
  return message('T', Buffer.concat(parts));
}

/** A DataRow of text values (null: SQL NULL). */
export function dataRow(values: ReadonlyArray<string | null>): Buffer {
  const parts: Buffer[] = [Buffer.alloc(2)];
  parts[0]!.writeInt16BE(values.length);
  for (const v of values) {
    const len = Buffer.alloc(4);
    if (v === null) {
      len.writeInt32BE(-1);
      parts.push(len);
    } else {
      const bytes = Buffer.from(v, 'utf8');
      len.writeInt32BE(bytes.length);
      parts.push(len, bytes);
    }
  }
  return message('D', Buffer.concat(parts));
}

export const commandComplete = (tag: string): Buffer => message('C', cstring(tag));
export const readyForQuery = (state: 'I' | 'T' | 'E' = 'I'): Buffer => message('Z', Buffer.from(state));
export const emptyQueryResponse = (): Buffer => message('I');
export const parseComplete = (): Buffer => message('1');
export const bindComplete = (): Buffer => message('2');
export const closeComplete = (): Buffer => message('3');
export const noData = (): Buffer => message('n');

export function parameterDescription(oids: readonly number[]): Buffer {
  const body = Buffer.alloc(2 + 4 * oids.length);
  body.writeInt16BE(oids.length, 0);
  oids.forEach((o, i) => body.writeInt32BE(o, 2 + 4 * i));
  return message('t', body);
}

/** ErrorResponse: severity, SQLSTATE, message (and an optional hint). */
export function errorResponse(sqlstate: string, text: string, hint?: string): Buffer {
  const fields = [cstring('SERROR'), cstring('VERROR'), cstring(`C${sqlstate}`), cstring(`M${text}`)];
  if (hint !== undefined) fields.push(cstring(`H${hint}`));
  fields.push(Buffer.alloc(1));
  return message('E', Buffer.concat(fields));
}
