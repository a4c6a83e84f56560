/** The daemon's log as a test reads it: every line kept in memory, in order. */
import { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { createLogger } from '../../src/logger.js';

export interface CapturedLog {
  /** Give it to the app under test. */
  logger: Logger;
  /** What it wrote so far: one JSON line per entry, newline included. */
  lines: string[];
}

export function captureLog(level: string): CapturedLog {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { logger: createLogger(level, sink), lines };
}
