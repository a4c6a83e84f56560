/** The headers the client gets with a relayed answer: the provider's, and the daemon's own. */
import { describe, expect, it } from 'vitest';
import { answerHeaders } from '../../../src/proxy/call-relay.js';
import { OVERHEAD_HEADER } from '../../../src/metrics.js';

describe('answerHeaders', () => {
  it("when the provider sends its own request id, then the client keeps it and gets the daemon's apart", () => {
    const headers = answerHeaders(
      {
        'content-type': 'application/json',
        'x-request-id': 'req_provider',
        connection: 'close',
        'set-cookie': ['a=b'],
      },
      { stepId: 'step-1', requestId: 'req-daemon' },
      1.25,
    );
    expect(headers).toEqual({
      'content-type': 'application/json',
      'x-request-id': 'req_provider',
      'x-runguard-step-id': 'step-1',
      'x-runguard-request-id': 'req-daemon',
      [OVERHEAD_HEADER]: expect.any(String),
    });
  });

  it("when the provider sends no request id, then the daemon's stands in for it", () => {
    const headers = answerHeaders({}, { stepId: 'step-1', requestId: 'req-daemon' }, 0);
    expect(headers['x-request-id']).toBe('req-daemon');
    expect(headers['x-runguard-request-id']).toBe('req-daemon');
  });
});
