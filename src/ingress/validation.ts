import { Ajv, type ValidateFunction } from 'ajv';
import type { FastifyInstance, FastifySchema } from 'fastify';

/**
 * Route schemas compiled on the first request that needs them, not at startup: compiling them
 * (and Ajv's meta-schema first) took a sixth of the server's start, and most routes are rarely
 * called. Shared by the ingress and the admin API.
 * The schemas are Keel's own, so they are not checked against the meta-schema; types are checked,
 * never converted ("yes" is not a boolean).
 */
export function compileSchemasLazily(app: FastifyInstance): void {
  let ajv: Ajv | undefined;
  app.setValidatorCompiler(({ schema }: { schema: FastifySchema }) => {
    let validate: ValidateFunction | undefined;
    return (data: unknown) => {
      ajv ??= new Ajv({ coerceTypes: false, removeAdditional: false, validateSchema: false, allErrors: false, strict: false });
      validate ??= ajv.compile(schema as object);
      return validate(data) ? { value: data } : { error: Object.assign(new Error('schema validation failed'), { validation: validate.errors ?? [] }) };
    };
  });
}
