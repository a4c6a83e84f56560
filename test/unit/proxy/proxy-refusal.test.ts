/** How the proxy says no: each failure before forwarding, in the provider's format or the API's. */
import { describe, expect, it } from 'vitest';
import type { FastifyError } from 'fastify';
import { ApiError } from '../../../src/errors.js';
import { denialRefusal, ProxyRefusal, refusalAnswer } from '../../../src/proxy/proxy-refusal.js';
import { providerOf, rememberingLogger } from './proxy-fakes.js';

const openai = providerOf('openai');
const anthropic = providerOf('anthropic');

describe('refusalAnswer', () => {
  it('when the guard denies a step, then OpenAI gets its denial body, the step id and no retry', () => {
    const refusal = new ProxyRefusal(403, 'USER_BLOCKED', 'runguard denied this model call: USER_BLOCKED.', 'step-1');
    const answer = refusalAnswer(refusal, openai, rememberingLogger());
    expect(answer).toEqual({
      status: 403,
      headers: { 'x-runguard-step-id': 'step-1', 'x-should-retry': 'false' },
      body: {
        error: {
          type: 'guardrail_denied',
          code: 'USER_BLOCKED',
          message: 'runguard denied this model call: USER_BLOCKED.',
          param: null,
        },
      },
    });
  });

  it('when the guard denies a step, then Anthropic gets a permission error naming the reason', () => {
    const answer = refusalAnswer(new ProxyRefusal(403, 'KILL_SWITCH', 'denied.'), anthropic, rememberingLogger());
    expect(answer.status).toBe(403);
    expect(answer.headers).toEqual({ 'x-should-retry': 'false' });
    expect(JSON.stringify(answer.body)).toContain('permission_error');
    expect(JSON.stringify(answer.body)).toContain('denied. (KILL_SWITCH)');
  });

  it('when a refusal is not a denial, then the provider gets its error body', () => {
    const refusal = new ProxyRefusal(400, 'BAD_PATH', 'The path may not contain dot segments or encoded slashes.');
    expect(refusalAnswer(refusal, openai, rememberingLogger()).body).toEqual({
      error: {
        type: 'invalid_request_error',
        code: 'BAD_PATH',
        message: 'The path may not contain dot segments or encoded slashes.',
        param: null,
      },
    });
  });

  it('when an API error is a 403, then it reads as an error, not as a denial', () => {
    const answer = refusalAnswer(new ApiError('FORBIDDEN'), openai, rememberingLogger());
    expect(answer.status).toBe(403);
    expect(answer.body).toMatchObject({ error: { type: 'invalid_request_error', code: 'FORBIDDEN' } });
  });

  it('when the daemon is overloaded, then the caller may retry after a second and nothing is logged', () => {
    const log = rememberingLogger();
    const answer = refusalAnswer(new ApiError('OVERLOADED'), openai, log);
    expect(answer.status).toBe(503);
    expect(answer.headers).toEqual({ 'retry-after': '1' });
    expect(log.lines).toEqual([]);
  });

  it('when an unexpected error happens, then it is logged and the answer says nothing of it', () => {
    const log = rememberingLogger();
    const answer = refusalAnswer(new Error('secret internals') as FastifyError, openai, log);
    expect(answer.status).toBe(500);
    expect(answer.headers).toEqual({});
    expect(JSON.stringify(answer.body)).not.toContain('secret');
    expect(log.lines.map((line) => [line.level, line.message])).toEqual([['error', 'proxy request failed']]);
  });

  it('when the provider is unknown, then the answer is the API format', () => {
    const answer = refusalAnswer(
      new ApiError('NOT_FOUND', 'No provider named "x" is configured.'),
      undefined,
      rememberingLogger(),
    );
    expect(answer).toEqual({
      status: 404,
      headers: { 'x-should-retry': 'false' },
      body: { detail: 'No provider named "x" is configured.', code: 'NOT_FOUND' },
    });
  });
});

describe('denialRefusal', () => {
  it("when a step is denied, then the refusal carries the reason, the rule's numbers and the step", () => {
    const refusal = denialRefusal(
      {
        id: 'step-9',
        decision: {
          outcome: 'DENY',
          reason: 'RUN_BUDGET_EXCEEDED',
          evaluated_rules: {},
          detail: { spend_usd: 2, budget_usd: 1 },
        },
      },
      'model call',
    );
    expect(refusal).toMatchObject({ statusCode: 403, code: 'RUN_BUDGET_EXCEEDED', stepId: 'step-9' });
    expect(refusal.message).toMatch(/^runguard denied this model call: RUN_BUDGET_EXCEEDED \(.+\)\.$/);
  });

  it('when a decision has no reason, then the code is DENIED', () => {
    const refusal = denialRefusal({ decision: { outcome: 'DENY', reason: null, evaluated_rules: {} } }, 'run');
    expect(refusal).toMatchObject({ statusCode: 403, code: 'DENIED', stepId: undefined });
    expect(refusal.message).toBe('runguard denied this run: DENIED.');
  });
});
