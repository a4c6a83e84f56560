/**
 * Early refusals of an upload (413 over the body limit, 401 without a valid key, the proxy's):
 * the answer goes out, the rest of the body is drained for a bounded time and size, and only then
 * is the connection closed, so the client reads its status instead of EPIPE or ECONNRESET.
 */
import { request, type OutgoingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnDaemonOnPostgres } from '../support/daemon.js';

const UPLOAD = Buffer.alloc(2 * 1024 * 1024, 'a');

let api: { url: string; apiKey: string; close(): Promise<void> };
beforeAll(async () => {
  const daemon = await spawnDaemonOnPostgres();
  api = { url: daemon.url, apiKey: daemon.apiKey!, close: () => daemon.close() };
});
afterAll(() => api?.close());

/** Posts the 2 MiB upload (written in 64 KiB chunks, as a client streams it); the status read, or the error. */
function upload(path: string, headers: OutgoingHttpHeaders): Promise<number | string> {
  return new Promise((resolve) => {
    const url = new URL(path, api.url);
    const req = request(url, {
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', 'content-length': UPLOAD.length, ...headers },
    });
    // The status read is what counts: an error after it (writing on, into a closed connection) does not.
    req.on('response', (res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? String(error)));
    let offset = 0;
    const writeMore = () => {
      while (offset < UPLOAD.length) {
        const chunk = UPLOAD.subarray(offset, offset + 65_536);
        offset += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', writeMore);
      }
      req.end();
    };
    writeMore();
  });
}

describe('refused uploads', { timeout: 120_000 }, () => {
  const cases: [string, string, () => OutgoingHttpHeaders, number][] = [
    ['over the body limit (413)', '/v1/runs', () => ({ authorization: `Bearer ${api.apiKey}` }), 413],
    ['without a valid key (401)', '/v1/runs', () => ({ authorization: 'Bearer lg_aaaaaaaaaaaa_forged' }), 401],
    [
      'at the proxy, without a valid key (401)',
      '/proxy/openai/v1/chat/completions',
      () => ({ 'x-runguard-key': 'lg_aaaaaaaaaaaa_forged', 'x-runguard-user-id': 'u' }),
      401,
    ],
  ];

  it.each(cases)(
    'when 20 uploads in a row are refused %s, then every one reads its status',
    async (_, path, headers, status) => {
      const got: (number | string)[] = [];
      for (let i = 0; i < 20; i++) got.push(await upload(path, headers()));
      expect(got).toEqual(Array(20).fill(status));
    },
  );

  it('when 40 refused uploads run in parallel, then every one reads its status', async () => {
    const got = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        upload('/v1/runs', { authorization: `Bearer ${i % 2 ? api.apiKey : 'lg_aaaaaaaaaaaa_forged'}` }),
      ),
    );
    // Forged keys from one address soon meet the failed-auth limit, whose 429 then answers every
    // call from it: an early refusal too, read like the others.
    expect(got).toEqual(Array.from({ length: 40 }, (_, i) => expect.toBeOneOf([i % 2 ? 413 : 401, 429])));
  });
});
