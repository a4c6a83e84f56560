/** Which form `GET /v1/usage/report` answers for an Accept header: CSV only when it weighs more. */
import { describe, expect, it } from 'vitest';
import { prefersCsv } from '../../../src/api/routes/usage.js';

describe("the spend report's content negotiation", () => {
  it.each([
    [undefined, false],
    ['*/*', false],
    ['application/json', false],
    ['text/csv', true],
    ['text/*', true],
    ['text/csv;q=0.5, application/json', false],
    ['application/json;q=0.2, text/csv', true],
    ['text/csv, application/json', false],
    ['text/csv;q=0', false],
  ])('Accept %s → CSV %s', (accept, csv) => {
    expect(prefersCsv(accept)).toBe(csv);
  });
});
