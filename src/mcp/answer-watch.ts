/**
 * Reading a server's answer on the side as it is relayed, for the responses to the tool calls it
 * carries: a JSON body once it has all come, an SSE stream event by event (the tool's step ends
 * when its response passes, while the stream may go on). Pure: no I/O.
 */
import { SseDecoder } from '../proxy/sse-decoder.js';
import { responseOf, type JsonRpcId } from './jsonrpc.js';

/** A response seen: its request's id, and whether it failed (a JSON-RPC error, or a result with isError). */
export type ResponseSeen = (id: JsonRpcId, failed: boolean, error: { code: number; message: string } | null) => void;

export class AnswerWatch {
  private sse: SseDecoder | null = null;
  private json: Buffer[] | null = null;
  private jsonBytes = 0;

  constructor(
    private readonly seen: ResponseSeen,
    /** Largest JSON answer read, and largest SSE event. */
    private readonly maxBytes: number,
  ) {}

  answered(contentType: string | undefined): void {
    if (/^text\/event-stream/i.test(contentType ?? '')) this.sse = new SseDecoder({ maxEventLength: this.maxBytes });
    else if (/json/i.test(contentType ?? '')) this.json = [];
  }

  chunk(chunk: Buffer): void {
    if (this.sse) {
      for (const event of this.sse.push(chunk)) if (event.event === 'message') this.read(event.data);
    } else if (this.json) {
      this.jsonBytes += chunk.length;
      if (this.jsonBytes > this.maxBytes) this.json = null;
      else this.json.push(chunk);
    }
  }

  /** The answer ended whole: a JSON body is read now. */
  end(): void {
    if (this.json) this.read(Buffer.concat(this.json).toString('utf8'));
    this.json = null;
  }

  private read(text: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return;
    }
    for (const message of Array.isArray(parsed) ? parsed : [parsed]) {
      const response = responseOf(message);
      if (!response) continue;
      const error = (message as { error?: { code?: unknown; message?: unknown } }).error;
      this.seen(
        response.id,
        response.failed,
        error ? { code: Number(error.code), message: String(error.message).slice(0, 500) } : null,
      );
    }
  }
}
