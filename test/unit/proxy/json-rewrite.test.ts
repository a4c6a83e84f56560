import { describe, expect, it } from 'vitest';
import { rewrittenBytes } from '../../../src/proxy/json-rewrite.js';

const asClientSent = (text: string) => {
  const raw = Buffer.from(text);
  return { raw, parsed: JSON.parse(text) as Record<string, unknown> };
};

describe('rewrittenBytes', () => {
  it("when a rewrite only adds members, then they are spliced into the client's bytes, which are otherwise kept", () => {
    // Spacing and key order the client chose, and an escape JSON.stringify would not write.
    const { raw, parsed } = asClientSent(
      ' {\n  "model" : "gpt-4o", "stream": true, "messages": [{"role":"user","content":"caf\\u00e9"}]}',
    );
    const rewritten = { ...parsed, stream_options: { include_usage: true } };
    const bytes = rewrittenBytes(raw, parsed, rewritten);
    expect(bytes.toString()).toBe(
      ' {"stream_options":{"include_usage":true},\n  "model" : "gpt-4o", "stream": true, "messages": [{"role":"user","content":"caf\\u00e9"}]}',
    );
    expect(JSON.parse(bytes.toString())).toEqual(rewritten);
  });

  it('when the client sent an empty object, then the added members need no comma', () => {
    const { raw, parsed } = asClientSent('{}');
    expect(rewrittenBytes(raw, parsed, { ...parsed, a: 1, b: undefined }).toString()).toBe('{"a":1}');
  });

  it('when a rewrite changes or drops a member, then the body is serialised whole', () => {
    const { raw, parsed } = asClientSent('{"stream": true, "stream_options": {"foo": 1}}');
    const changed = { ...parsed, stream_options: { foo: 1, include_usage: true } };
    expect(rewrittenBytes(raw, parsed, changed).toString()).toBe(JSON.stringify(changed));
    const dropped = { stream: true };
    expect(rewrittenBytes(raw, parsed, dropped).toString()).toBe(JSON.stringify(dropped));
  });

  it("when nothing is added, then the client's bytes go as they are", () => {
    const { raw, parsed } = asClientSent('{"a": [1, 2]}');
    expect(rewrittenBytes(raw, parsed, { ...parsed })).toBe(raw);
  });

  it('when the bytes do not start with the object (a BOM), then the body is serialised whole', () => {
    const { parsed } = asClientSent('{"a": 1}');
    const raw = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"a": 1}')]);
    const rewritten = { ...parsed, b: 2 };
    expect(rewrittenBytes(raw, parsed, rewritten).toString()).toBe(JSON.stringify(rewritten));
  });

  it('when an added member has no JSON form, then it is left out, as JSON.stringify does', () => {
    const { raw, parsed } = asClientSent('{"a": 1}');
    expect(rewrittenBytes(raw, parsed, { ...parsed, f: () => 1, b: 2 }).toString()).toBe('{"b":2,"a": 1}');
  });

  it('when the rewrite is not an object, then it is serialised whole', () => {
    const { raw, parsed } = asClientSent('{"a": 1}');
    expect(rewrittenBytes(raw, parsed, [1]).toString()).toBe('[1]');
  });
});
