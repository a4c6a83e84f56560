import { describe, expect, it } from 'vitest';
import { SseDecoder, type SseEvent } from '../../../src/proxy/sse-decoder.js';
import { bytes, pieces, splitAt } from '../../proxy/chunks.js';

function decode(chunks: Uint8Array[], decoder = new SseDecoder()): SseEvent[] {
  const events = chunks.flatMap((chunk) => decoder.push(chunk));
  return [...events, ...decoder.end()];
}

const STREAM =
  ': a comment, ignored\n' +
  'event: greeting\nid: 1\ndata: héllo wörld 👋\n\n' +
  'data: first line\r\ndata: second line\r\n\r\n' +
  'data:no space\rdata:  two spaces\r\r' +
  'retry: 1000\nunknown: field\ndata: 日本語テキスト\n\n';

const EXPECTED: SseEvent[] = [
  { event: 'greeting', data: 'héllo wörld 👋', id: '1' },
  { event: 'message', data: 'first line\nsecond line', id: '1' },
  { event: 'message', data: 'no space\n two spaces', id: '1' },
  { event: 'message', data: '日本語テキスト', id: '1' },
];

describe('SseDecoder', () => {
  it('when a stream arrives whole, then it yields each event with its type, joined data and last id', () => {
    expect(decode([bytes(STREAM)])).toEqual(EXPECTED);
  });

  it('when the stream arrives byte by byte, inside multi-byte characters too, then the events are the same', () => {
    expect(decode(pieces(STREAM, 1))).toEqual(EXPECTED);
  });

  it('when the stream is cut in two at any byte, then the events are the same', () => {
    const length = bytes(STREAM).length;
    for (let at = 0; at <= length; at++) expect(decode(splitAt(STREAM, at)), `cut at ${at}`).toEqual(EXPECTED);
  });

  it('when a CR ends one chunk and a LF starts the next, then they make one line terminator', () => {
    const decoder = new SseDecoder();
    expect(decoder.push(bytes('data: a\r'))).toEqual([]);
    expect(decoder.push(bytes('\ndata: b\r'))).toEqual([]);
    expect(decoder.push(bytes('\n\r'))).toEqual([{ event: 'message', data: 'a\nb', id: '' }]);
    expect(decoder.push(bytes('\n'))).toEqual([]); // the LF of the CRLF blank line, not another blank line
  });

  it('when events hold only comments, an event name or an id, then nothing is dispatched', () => {
    expect(decode([bytes(': ping\n\nevent: x\n\nid: 7\n\n:\n\n')])).toEqual([]);
  });

  it('when a data line is empty, then the event is dispatched with empty data', () => {
    expect(decode([bytes('data\n\ndata:\ndata:\n\n')])).toEqual([
      { event: 'message', data: '', id: '' },
      { event: 'message', data: '\n', id: '' },
    ]);
  });

  it('when an id holds a NUL, then it is ignored; an id persists across events', () => {
    expect(decode([bytes('id: a\ndata: 1\n\nid: b\0c\ndata: 2\n\n')])).toEqual([
      { event: 'message', data: '1', id: 'a' },
      { event: 'message', data: '2', id: 'a' },
    ]);
  });

  it('when the stream starts with a BOM, then it is not part of the first field name', () => {
    expect(decode([bytes('\uFEFFdata: x\n\n')])).toEqual([{ event: 'message', data: 'x', id: '' }]);
  });

  it('when the stream ends without the blank line, then the unfinished event is discarded', () => {
    expect(decode([bytes('data: done\n\ndata: unfinished\n')])).toEqual([{ event: 'message', data: 'done', id: '' }]);
  });

  describe('when an event is larger than the limit', () => {
    const small = (): SseDecoder => new SseDecoder({ maxEventLength: 100 });

    it('then a single huge line is dropped and the next event still arrives', () => {
      const decoder = small();
      const stream = `data: ${'x'.repeat(10_000)}\n\ndata: next\n\n`;
      expect(decode(pieces(stream, 7), decoder)).toEqual([{ event: 'message', data: 'next', id: '' }]);
      expect(decoder.droppedEvents).toBe(1);
    });

    it('then many short data lines are dropped together, up to the blank line', () => {
      const decoder = small();
      const stream = `event: big\n${'data: 0123456789\n'.repeat(50)}\nevent: ok\ndata: next\n\n`;
      expect(decode([bytes(stream)], decoder)).toEqual([{ event: 'ok', data: 'next', id: '' }]);
      expect(decoder.droppedEvents).toBe(1);
    });

    it('then a huge line cut right before its LF does not end the event early', () => {
      const decoder = small();
      const events = [
        ...decoder.push(bytes(`data: ${'x'.repeat(500)}`)),
        ...decoder.push(bytes('\ndata: tail of the big event\n\ndata: next\n\n')),
      ];
      expect(events).toEqual([{ event: 'message', data: 'next', id: '' }]);
    });

    it('then a line of megabytes streamed in pieces is dropped and decoding resumes after it', () => {
      const decoder = new SseDecoder({ maxEventLength: 1024 });
      const chunk = bytes('y'.repeat(64 * 1024));
      decoder.push(bytes('data: '));
      for (let i = 0; i < 100; i++) expect(decoder.push(chunk)).toEqual([]);
      expect(decode([bytes('\n\ndata: after\n\n')], decoder)).toEqual([{ event: 'message', data: 'after', id: '' }]);
    });
  });
});
