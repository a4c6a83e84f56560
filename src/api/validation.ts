/**
 * Request validation. Fastify's defaults coerce body types and can drop unknown properties; the
 * contract wants a 422 for both, so bodies get a strict Ajv. Paths and query strings arrive as
 * text and need coercion to integers and booleans. The validators themselves are compiled by the
 * app's schema compilers (schema-compilers.ts); this adds what no schema can see.
 */
import type { FastifyInstance } from 'fastify';
import { ApiError, type FieldError } from '../errors.js';
import { TAG_FILTER_PATTERN, TAG_KEY_PATTERN, TAG_VALUE_PATTERN, UUID_PATTERN } from './schemas.js';

export function registerValidation(app: FastifyInstance) {
  // A callback hook, not an async one: every request passes here, and a promise each is waste.
  app.addHook('preValidation', (request, _reply, done) => {
    const problem = request.body === undefined || Buffer.isBuffer(request.body) ? null : jsonBodyProblem(request.body);
    done(problem ? new ApiError('VALIDATION_FAILED', undefined, { errors: [problem] }) : undefined);
  });
}

/** Deeper JSON than this is refused: nothing legitimate nests so deep, and storage would choke. */
export const MAX_JSON_DEPTH = 32;

/**
 * The first problem in a parsed JSON body that no schema can see: nesting deeper than
 * MAX_JSON_DEPTH, or text (keys included) that Postgres cannot store (NUL, lone surrogates).
 */
export function jsonBodyProblem(body: unknown): FieldError | null {
  const stack: { value: unknown; path: string; depth: number }[] = [{ value: body, path: 'body', depth: 0 }];
  while (stack.length > 0) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === 'string') {
      if (value.includes('\u0000') || !value.isWellFormed())
        return { path, message: 'must not contain NUL or unpaired surrogates' };
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (depth >= MAX_JSON_DEPTH) return { path, message: `nests deeper than ${MAX_JSON_DEPTH} levels` };
    for (const [key, child] of Object.entries(value)) {
      if (key.includes('\u0000') || !key.isWellFormed())
        return { path, message: 'has a key with NUL or unpaired surrogates' };
      stack.push({ value: child, path: Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`, depth: depth + 1 });
    }
  }
  return null;
}

interface AjvIssue {
  instancePath: string;
  message?: string;
  keyword: string;
  params: Record<string, unknown>;
  /** Set on the issues of a `propertyNames` schema: the key that failed it. */
  propertyName?: string;
}

/** What a pattern means, said instead of the pattern itself. */
const PATTERN_MESSAGES: Record<string, string> = {
  [UUID_PATTERN]: 'must be a UUID',
  [TAG_KEY_PATTERN]: 'is not a tag key: 1 to 64 characters of a-z, 0-9, _, . and -',
  [TAG_VALUE_PATTERN]: 'must not contain control characters',
  [TAG_FILTER_PATTERN]: 'must be key:value (a key of 1 to 64 characters of a-z, 0-9, _, . and -; a value of 1 to 128)',
};

/** Ajv issues as the contract's `errors`: `{path: "body.user_id", message}`. */
export function fieldErrors(context: string, issues: readonly AjvIssue[]): FieldError[] {
  const part = context === 'querystring' ? 'query' : context;
  // A key refused by `propertyNames` comes twice: its own issue, then the schema's summary.
  return issues
    .filter((issue) => issue.keyword !== 'propertyNames')
    .map((issue) => {
      const segments = issue.instancePath.split('/').filter(Boolean);
      if (issue.keyword === 'required') segments.push(String(issue.params.missingProperty));
      if (issue.propertyName !== undefined) segments.push(issue.propertyName);
      if (issue.keyword === 'additionalProperties') {
        segments.push(String(issue.params.additionalProperty));
        return { path: [part, ...segments].join('.'), message: 'is not a known field' };
      }
      const meant = issue.keyword === 'pattern' ? PATTERN_MESSAGES[String(issue.params.pattern)] : undefined;
      return { path: [part, ...segments].join('.'), message: meant ?? issue.message ?? 'is invalid' };
    });
}
