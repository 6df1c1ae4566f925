// JSON schemas shared by the admin routes.

export const nullableString = { type: ['string', 'null'] } as const;
export const nullableBoolean = { type: ['boolean', 'null'] } as const;
export const stringMap = { type: ['object', 'null'], additionalProperties: { type: 'string' } } as const;
/** Headers sent to an endpoint: names and values are checked one by one by the route (with messages naming the header). */
export const headerMap = { type: ['object', 'null'], maxProperties: 64, additionalProperties: { type: 'string', maxLength: 8192 } } as const;

export const idParam = (name: string) =>
  ({ type: 'object', properties: { [name]: { type: 'string', maxLength: 256 } }, required: [name] }) as const;
