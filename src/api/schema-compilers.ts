/**
 * What the routes' schemas are compiled into: request validators (Ajv; bodies get a strict one,
 * paths and query strings a coercing one, see validation.ts) and answer serializers
 * (fast-json-stringify, with the options Fastify's own serializer compiler gives it). Compiling
 * is most of what building the app costs, at every daemon start, and the routes share schema
 * objects: one route's error answers are one schema for five statuses, the same for every route.
 * A set of compilers compiles each schema object once (Ajv keeps what it compiled by schema; the
 * serializers are kept here). What a schema compiles to depends on that schema alone (no route
 * adds shared schemas with `addSchema`, which the compilers would ignore), so the apps built in
 * one process can share a set: the tests build hundreds.
 */
import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import fastJsonStringify from 'fast-json-stringify';
import type { FastifyInstance, FastifySchemaCompiler, FastifySerializerCompiler } from 'fastify';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

const common: Options = { allErrors: true, removeAdditional: false, useDefaults: true, strict: false };

export interface SchemaCompilers {
  validator: FastifySchemaCompiler<unknown>;
  serializer: FastifySerializerCompiler<unknown>;
}

export function createSchemaCompilers(): SchemaCompilers {
  const strict = addFormats(new Ajv({ ...common, coerceTypes: false }));
  const coercing = addFormats(new Ajv({ ...common, coerceTypes: true }));
  const serializers = new WeakMap<object, (data: unknown) => string>();
  return {
    validator: ({ schema, httpPart }) => (httpPart === 'body' ? strict : coercing).compile(schema as object),
    serializer: ({ schema }) => {
      const key = schema as object;
      let serialize = serializers.get(key);
      if (!serialize) {
        serialize = fastJsonStringify(key);
        serializers.set(key, serialize);
      }
      return serialize;
    },
  };
}

/** Compiles the app's route schemas with these compilers. */
export function useSchemaCompilers(app: FastifyInstance, compilers: SchemaCompilers): void {
  app.setValidatorCompiler(compilers.validator);
  app.setSerializerCompiler(compilers.serializer);
}
