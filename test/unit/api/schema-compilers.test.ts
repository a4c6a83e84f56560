/**
 * The app's schema compilers compile each schema object once, however many routes and answers
 * share it (and however many apps share the compilers), into what Fastify's own compilers give:
 * a strict validator for bodies, a coercing one for paths and queries, fast-json-stringify's
 * serializer.
 */
import fastJsonStringify from 'fast-json-stringify';
import { describe, expect, it } from 'vitest';
import { createSchemaCompilers } from '../../../src/api/schema-compilers.js';
import { Type } from '../../../src/contract/typebox.js';

const ERROR = Type.Object({ detail: Type.String(), code: Type.String() });
const QUERY = Type.Object({ limit: Type.Integer() }, { additionalProperties: false });

describe('the schema compilers', () => {
  it('when one answer schema is compiled for several routes and statuses, then it is compiled once', () => {
    const compilers = createSchemaCompilers();
    const first = compilers.serializer({ schema: ERROR, method: 'GET', url: '/a', httpStatus: '404' });
    const again = compilers.serializer({ schema: ERROR, method: 'POST', url: '/b', httpStatus: '422' });
    expect(again).toBe(first);
    const other = compilers.serializer({ schema: Type.Object({ detail: Type.String() }), method: 'GET', url: '/a' });
    expect(other).not.toBe(first);
    const body = { detail: 'no', code: 'X', extra: true };
    expect(first(body)).toBe(fastJsonStringify(ERROR)(body));
  });

  it('when one request schema is compiled again, then the validator is the same one, strict for bodies and coercing elsewhere', () => {
    const compilers = createSchemaCompilers();
    const body = compilers.validator({ schema: QUERY, method: 'POST', url: '/a', httpPart: 'body' });
    expect(compilers.validator({ schema: QUERY, method: 'PUT', url: '/b', httpPart: 'body' })).toBe(body);
    expect(body({ limit: '5' })).toBe(false);
    const query = compilers.validator({ schema: QUERY, method: 'GET', url: '/a', httpPart: 'querystring' });
    const value = { limit: '5' };
    expect(query(value)).toBe(true);
    expect(value).toEqual({ limit: 5 });
  });
});
