/**
 * Request validation. Fastify's defaults coerce body types and can drop unknown properties; the
 * contract wants a 422 for both, so bodies get a strict Ajv. Paths and query strings arrive as
 * text and need coercion to integers and booleans.
 */
import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifyInstance } from 'fastify';
import type { FieldError } from '../errors.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

const common: Options = { allErrors: true, removeAdditional: false, useDefaults: true, strict: false };

export function registerValidation(app: FastifyInstance) {
  const strict = addFormats(new Ajv({ ...common, coerceTypes: false }));
  const coercing = addFormats(new Ajv({ ...common, coerceTypes: true }));
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? strict : coercing).compile(schema));
}

interface AjvIssue {
  instancePath: string;
  message?: string;
  keyword: string;
  params: Record<string, unknown>;
}

/** Ajv issues as the contract's `errors`: `{path: "body.user_id", message}`. */
export function fieldErrors(context: string, issues: readonly AjvIssue[]): FieldError[] {
  const part = context === 'querystring' ? 'query' : context;
  return issues.map((issue) => {
    const segments = issue.instancePath.split('/').filter(Boolean);
    if (issue.keyword === 'required') segments.push(String(issue.params.missingProperty));
    if (issue.keyword === 'additionalProperties') {
      segments.push(String(issue.params.additionalProperty));
      return { path: [part, ...segments].join('.'), message: 'is not a known field' };
    }
    return { path: [part, ...segments].join('.'), message: issue.message ?? 'is invalid' };
  });
}
