/**
 * A proxied call's audit summary stays within its byte limit: a summary whose texts are short is
 * not written out to be measured, and one that may be long is measured as JSON.
 */
import { describe, expect, it } from 'vitest';
import { auditSummary, type AuditInput } from '../../../src/proxy/audit-summary.js';

const input = (path: string, model: string | null): AuditInput => ({
  provider: 'openai',
  method: 'POST',
  path,
  inspected: { model, stream: false, rewrittenBody: undefined },
  body: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 1e300, tools: [] },
  bodyBytes: 123,
});

describe('audit summary', () => {
  it('when a path has a query, then the summary names the path without it', () => {
    expect(auditSummary(input('/v1/chat/completions?key=secret', 'gpt-4o')).path).toBe('/v1/chat/completions');
  });

  it('when the texts are random and the limit small or large, then it is truncated exactly when its JSON is longer', () => {
    let seed = 49;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    // Control characters (6 bytes of JSON each), multi-byte characters, plain letters.
    const alphabet = ['\u0001', '\u001f', 'é', '€', '𝄞', 'a', '"', '\\', '/'];
    const text = (max: number) =>
      Array.from({ length: Math.floor(random() * max) }, () => alphabet[Math.floor(random() * alphabet.length)]).join(
        '',
      );
    for (let i = 0; i < 2_000; i++) {
      const call = input(`/v1/${text(300)}`, random() < 0.2 ? null : text(150));
      const maxBytes = Math.floor(random() * 2_500);
      const full = auditSummary(call, { maxBytes: 1e9 });
      const expected =
        Buffer.byteLength(JSON.stringify(full)) > maxBytes
          ? { provider: 'openai', model: full.model, truncated: true }
          : full;
      expect(auditSummary(call, { maxBytes })).toEqual(expected);
    }
  });
});
