/**
 * HTTP/1.1 written by hand on a TCP socket, for what fetch cannot do: send headers and stall the
 * body, cut an upload half way, hold connections open doing nothing, write any Host header.
 */
import { connect, type Socket } from 'node:net';

export interface RawConnection {
  socket: Socket;
  /** Everything received so far. */
  received(): string;
  /** Resolves once some bytes arrived (the status line, usually). */
  answered: Promise<string>;
  /** Resolves when the server closed the connection (or it failed). */
  closed: Promise<void>;
}

/** Connects to `baseUrl`'s host and port and writes `text` (when given). */
export async function rawConnection(baseUrl: string, text?: string | Buffer): Promise<RawConnection> {
  const { hostname, port } = new URL(baseUrl);
  const socket = connect(Number(port), hostname);
  let data = '';
  let answer: (text: string) => void;
  const answered = new Promise<string>((resolve) => (answer = resolve));
  socket.on('data', (chunk: Buffer) => {
    data += chunk.toString('latin1');
    answer(data);
  });
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  if (text !== undefined) socket.write(text);
  return { socket, received: () => data, answered, closed };
}

/** The head of a request: request line and headers, then the blank line. */
export function requestHead(method: string, path: string, headers: Record<string, string | number>): string {
  const lines = [
    `${method} ${path} HTTP/1.1`,
    ...Object.entries({ host: '127.0.0.1', ...headers }).map(([k, v]) => `${k}: ${v}`),
  ];
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** The status code of a raw answer; null when none arrived. */
export const statusOf = (text: string): number | null => {
  const match = /^HTTP\/1\.1 (\d{3})/.exec(text);
  return match ? Number(match[1]) : null;
};
