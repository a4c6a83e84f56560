import { describe, expect, it } from 'vitest';
import { asObject, mayHoldUsage } from '../../../src/proxy/json-fields.js';
import { tokenCount } from '../../../src/contract/provider-usage.js';
import { NO_TOKENS } from '../../../src/proxy/providers/types.js';
import { createUsageTracker, lastObjectOfKey, type UsageExtractor } from '../../../src/proxy/usage-tracker.js';
import { bytes, pieces } from '../../proxy/chunks.js';

/** Reads `usage.n` as prompt tokens; counts events seen. */
function counter(): UsageExtractor & { events: string[] } {
  const events: string[] = [];
  return {
    events,
    fromJson: (body) => ({ ...NO_TOKENS, promptTokens: tokenCount(asObject(asObject(body)?.usage)?.n) }),
    streamReader: () => ({
      onEvent(event) {
        events.push(event.data);
        if (event.data === 'boom') throw new Error('reader bug');
      },
      usage: () => ({ ...NO_TOKENS, completionTokens: events.length }),
    }),
  };
}

describe('usage tracker', () => {
  it.each([
    ["Anthropic's error event", 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'],
    ["the Responses API's response.failed", 'event: response.failed\ndata: {"type":"response.failed"}\n\n'],
    [
      "a chat stream's error object",
      'data: {"error": {"message": "The server had an error", "type": "server_error"}}\n\n',
    ],
  ])('when a stream carries %s, then it is seen as failed; ordinary events are not', (_label, failure) => {
    const ok =
      'data: {"choices":[{"delta":{"content":"an \\"error\\" word"}}]}\n\nevent: message_delta\ndata: {"error_count":0}\n\n';
    const clean = createUsageTracker(counter(), 'text/event-stream');
    for (const chunk of pieces(ok, 7)) clean.push(chunk);
    clean.end();
    expect(clean.streamFailed()).toBe(false);
    const failed = createUsageTracker(counter(), 'text/event-stream');
    for (const chunk of pieces(ok + failure, 7)) failed.push(chunk);
    failed.end();
    expect(failed.streamFailed()).toBe(true);
    expect(createUsageTracker(counter(), 'application/json').streamFailed()).toBe(false);
  });

  it('when a JSON body is larger than the cap, then usage is still read from its tail', () => {
    const vectors = Array.from({ length: 4000 }, (_, i) => ({ index: i, embedding: Array(40).fill(0.123456789) }));
    const text = JSON.stringify({ data: vectors, note: '{"usage": {"n": 1}}', usage: { n: 42, extra: { x: '}' } } });
    expect(text.length).toBeGreaterThan(1024 * 1024);
    for (const chunks of [pieces(text, 16 * 1024), [bytes(text)]]) {
      const tracker = createUsageTracker(counter(), 'application/json', { maxJsonBytes: 1024 * 1024, tailBytes: 1024 });
      for (const chunk of chunks) tracker.push(chunk);
      expect(tracker.end().promptTokens).toBe(42);
    }
  });

  it('when the JSON body is not JSON, then usage is unknown; end is idempotent and later pushes ignored', () => {
    const tracker = createUsageTracker(counter(), undefined);
    tracker.push(bytes('<html>Bad gateway</html>'));
    expect(tracker.end()).toEqual(NO_TOKENS);
    tracker.push(bytes('{"usage":{"n":3}}'));
    expect(tracker.end()).toEqual(NO_TOKENS);
  });

  it('when the caller reuses its buffer after a push, then the tracker read its own copy', () => {
    const tracker = createUsageTracker(counter(), 'application/json');
    const buffer = Buffer.from('{"usage":{"n":7}}');
    tracker.push(buffer);
    buffer.fill(0x20);
    expect(tracker.end().promptTokens).toBe(7);
  });

  it('when a stream reader throws, then the tracker swallows it and goes on', () => {
    const extractor = counter();
    const tracker = createUsageTracker(extractor, 'Text/Event-Stream; charset=UTF-8');
    expect(() => tracker.push(bytes('data: boom\n\ndata: fine\n\n'))).not.toThrow();
    expect(tracker.end().completionTokens).toBe(2);
  });

  it('when the endpoint reports no usage, then the tracker is inert', () => {
    const tracker = createUsageTracker(null, 'application/json');
    tracker.push(bytes('{"usage":{"n":7}}'));
    expect(tracker.end()).toEqual(NO_TOKENS);
  });

  it('when looking for the last object of a key, then strings holding braces and quotes do not confuse it', () => {
    expect(lastObjectOfKey('…"x":1,"usage" : {"a":"}\\"{","b":{"c":2}}}', 'usage')).toEqual({ a: '}"{', b: { c: 2 } });
    expect(lastObjectOfKey('"usage": null}', 'usage')).toBeUndefined();
    expect(lastObjectOfKey('"usage": {"a": 1', 'usage')).toBeUndefined();
  });

  it('when the same key follows the usage object with another value, then the object is still found', () => {
    // A Responses API body: user metadata after the usage may hold a string under the same key.
    const tail = '"output":[],"usage":{"input_tokens":5},"user":null,"metadata":{"usage":"nightly batch"}}';
    expect(lastObjectOfKey(tail, 'usage')).toEqual({ input_tokens: 5 });
    expect(lastObjectOfKey('"usage":null,"x":{"usage":[1]}', 'usage')).toBeUndefined();
    // Null usage is not answered with a tool schema's property of the same name.
    const noUsage =
      '"tools":[{"parameters":{"properties":{"usage":{"type":"string"}}}}],"usage":null,"metadata":{"usage":"x"}}';
    expect(lastObjectOfKey(noUsage, 'usage')).toBeUndefined();
  });

  it('when a JSON body is larger than 256 KiB, then by default it is read from its tail, with the same usage', () => {
    const vectors = Array.from({ length: 300 }, (_, i) => ({ index: i, embedding: Array(100).fill(0.0123456789) }));
    // Not JSON at its head: parsed whole, it would give no usage at all.
    const text = `{"broken":[x,${JSON.stringify({ data: vectors, model: 'e', usage: { n: 9 }, metadata: { usage: 'x' } }).slice(1)}`;
    expect(text.length).toBeGreaterThan(256 * 1024);
    const tracker = createUsageTracker(counter(), 'application/json');
    for (const chunk of pieces(text, 16 * 1024)) tracker.push(chunk);
    expect(tracker.end().promptTokens).toBe(9);
  });

  it('when telling which stream events may carry usage, then only a usage key with an object passes', () => {
    expect(mayHoldUsage('{"choices":[{"delta":{"content":"Hi"}}],"usage":null}')).toBe(false);
    expect(mayHoldUsage('{"choices":[],"usage":{"prompt_tokens":3}}')).toBe(true);
    expect(mayHoldUsage('{"type":"message_delta","usage" :\n {"output_tokens":5}}')).toBe(true);
    // The model's own text: its quotes are escaped, so it cannot pose as the key.
    expect(mayHoldUsage('{"delta":{"content":"say \\"usage\\":{ here"},"usage":null}')).toBe(false);
    expect(mayHoldUsage('[DONE]')).toBe(false);
  });
});
