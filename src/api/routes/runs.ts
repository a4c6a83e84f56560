/** The run API: start and end runs, create and finish steps, list and read them. */
import { Readable } from 'node:stream';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError } from '../../errors.js';
import { stepTokens } from '../step-tokens.js';
import type { GuardService } from '../../guard/guard-service.js';
import { idempotencyClaim, type IdempotencyClaim } from '../../guard/idempotency-claim.js';
import type { RunHistory } from '../../admin/run-history.js';
import type { Principal } from '../auth.js';
import { NO_TELEMETRY, traceparentOf, type RunTelemetry, type StepReport } from '../../telemetry/telemetry.js';
import {
  RunCreateBody,
  RunCreated,
  RunDetail,
  RunEndBody,
  RunEnded,
  RunListQuery,
  RunPage,
  RunParams,
  StepCreateBody,
  StepCreated,
  StepParams,
  StepUpdateBody,
  StepUpdated,
  errorResponses,
  pathUuid,
} from '../../contract/index.js';

/**
 * The Idempotency-Key of a write, bound to the caller's workspace and this exact request; the
 * record keeps the status the route answers with.
 */
function claimFrom(request: FastifyRequest, answerStatus: number): IdempotencyClaim | undefined {
  const key = request.headers['idempotency-key'];
  if (key === undefined) return undefined;
  if (typeof key !== 'string' || key.length < 1 || key.length > 255) {
    throw new ApiError('VALIDATION_FAILED', 'Idempotency-Key must be 1 to 255 characters.');
  }
  // Lowercase: these paths hold only lowercase words and ids, which name the same run in either case.
  const path = request.url.replace(/\/$/, '').toLowerCase();
  return idempotencyClaim(
    request.principal.workspaceId,
    key,
    { method: request.method, path, body: request.body },
    answerStatus,
  );
}

/**
 * A streamed run detail's pieces, a failure logged as the error it is: past the first page the
 * status is sent, so the client only sees its answer cut, and fastify would log a warning.
 */
async function* cutsLogged<T>(pieces: AsyncIterable<T>, request: FastifyRequest): AsyncIterable<T> {
  try {
    yield* pieces;
  } catch (error) {
    request.log.error({ err: error }, 'run detail cut short: reading a later page of its steps failed');
    throw error;
  }
}

/** An agent key reads and writes only the runs it started: its id; any other credential, every run. */
const agentKeyOf = (principal: Principal): string | null => (principal.role === 'agent' ? principal.subjectId : null);

const NO_STEP_TOKENS = {
  promptTokens: null,
  completionTokens: null,
  cacheReadTokens: null,
  cacheWriteTokens: null,
  reasoningTokens: null,
};

/** Steps created through the API, until their result: what their span needs of their start. */
const MAX_STEPS_AWAITING_RESULT = 10_000;

export const runRoutes: FastifyPluginAsync<{
  guard: GuardService;
  runs: RunHistory;
  telemetry?: RunTelemetry;
}> = async (base, { guard, runs, telemetry = NO_TELEMETRY }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  const stepStarts = new Map<
    string,
    Omit<
      StepReport,
      | 'status'
      | 'endedAt'
      | 'promptTokens'
      | 'completionTokens'
      | 'cacheReadTokens'
      | 'cacheWriteTokens'
      | 'reasoningTokens'
    >
  >();

  app.post(
    '/v1/runs',
    {
      config: { auth: 'key', agent: true },
      schema: {
        tags: ['runs'],
        summary: 'Start a run (evaluates all six rules; a denial is a 201 with status BLOCKED)',
        body: RunCreateBody,
        response: {
          201: RunCreated,
          ...errorResponses(400, 401, 413, 422),
        },
      },
    },
    async (request, reply) => {
      const { principal } = request;
      const started = await guard.startRun(
        principal.workspaceId,
        { ...request.body, apiKeyId: principal.kind === 'key' ? principal.subjectId : null },
        claimFrom(request, 201),
      );
      if (telemetry.enabled) {
        telemetry.runStarted(
          {
            id: started.id,
            userId: request.body.user_id,
            workspaceId: request.principal.workspaceId,
            status: started.status,
            outcome: started.decision.outcome,
            reason: started.decision.reason,
          },
          traceparentOf(request.headers.traceparent),
        );
      }
      return reply.status(201).send(started);
    },
  );

  app.post(
    '/v1/runs/:run_id/end',
    {
      config: { auth: 'key', agent: true },
      schema: {
        tags: ['runs'],
        summary: 'End a RUNNING run',
        params: RunParams,
        body: RunEndBody,
        response: {
          200: RunEnded,
          ...errorResponses(400, 401, 404, 409, 422),
        },
      },
    },
    async (request) => {
      const ended = await guard.endRun(
        request.principal.workspaceId,
        pathUuid(request.params.run_id),
        request.body.status,
        claimFrom(request, 200),
        agentKeyOf(request.principal),
      );
      telemetry.runEnded(ended.id, ended.status);
      return ended;
    },
  );

  app.post(
    '/v1/runs/:run_id/steps',
    {
      config: { auth: 'key', agent: true },
      schema: {
        tags: ['runs'],
        summary: 'Create a step (evaluates rules 1 to 4; a denial is a 201 with status BLOCKED)',
        params: RunParams,
        body: StepCreateBody,
        response: {
          201: StepCreated,
          ...errorResponses(400, 401, 404, 409, 413, 422),
        },
      },
    },
    async (request, reply) => {
      const { principal } = request;
      const created = await guard.createStep(
        principal.workspaceId,
        pathUuid(request.params.run_id),
        { ...request.body, apiKeyId: principal.kind === 'key' ? principal.subjectId : null },
        claimFrom(request, 201),
        agentKeyOf(request.principal),
      );
      if (telemetry.enabled) {
        const start = {
          workspaceId: request.principal.workspaceId,
          runId: created.run_id,
          stepId: created.id,
          type: request.body.type,
          provider: null,
          providerType: null,
          path: null,
          requestModel: request.body.model ?? null,
          responseModel: null,
          toolName: request.body.tool_name ?? null,
          outcome: created.decision.outcome,
          reason: created.decision.reason,
          startedAt: Date.now(),
        };
        if (created.status === 'BLOCKED') {
          telemetry.step(
            { ...start, status: 'BLOCKED', endedAt: start.startedAt, ...NO_STEP_TOKENS },
            traceparentOf(request.headers.traceparent),
          );
        } else {
          if (stepStarts.size >= MAX_STEPS_AWAITING_RESULT) stepStarts.delete(stepStarts.keys().next().value!);
          stepStarts.set(created.id, start);
        }
      }
      return reply.status(201).send(created);
    },
  );

  app.patch(
    '/v1/runs/:run_id/steps/:step_id',
    {
      config: { auth: 'key', agent: true },
      schema: {
        tags: ['runs'],
        summary: "Report a step's result; token counts price it",
        params: StepParams,
        body: StepUpdateBody,
        response: {
          200: StepUpdated,
          ...errorResponses(400, 401, 404, 409, 422),
        },
      },
    },
    async (request) => {
      const body = request.body;
      const finished = await guard.finishStep(
        request.principal.workspaceId,
        pathUuid(request.params.run_id),
        pathUuid(request.params.step_id),
        {
          status: body.status,
          durationMs: body.duration_ms ?? null,
          ...stepTokens(body),
          outputData: body.output_data ?? null,
        },
        claimFrom(request, 200),
        agentKeyOf(request.principal),
      );
      const start = telemetry.enabled ? stepStarts.get(finished.id) : undefined;
      if (start) {
        stepStarts.delete(finished.id);
        const endedAt = Date.now();
        const tokens = stepTokens(body);
        telemetry.step(
          {
            ...start,
            status: finished.status,
            startedAt: body.duration_ms == null ? start.startedAt : endedAt - body.duration_ms,
            endedAt,
            promptTokens: tokens.promptTokens,
            completionTokens: tokens.completionTokens,
            cacheReadTokens: tokens.cacheReadTokens ?? null,
            cacheWriteTokens: tokens.cacheWriteTokens ?? null,
            reasoningTokens: tokens.reasoningTokens ?? null,
          },
          traceparentOf(request.headers.traceparent),
        );
      }
      return finished;
    },
  );

  app.get(
    '/v1/runs',
    {
      config: { auth: 'any', agent: true },
      // `tag` may be given once or more: once, the query string has it as text.
      preValidation: async (request) => {
        const query = request.query as { tag?: unknown };
        if (typeof query.tag === 'string') query.tag = [query.tag];
      },
      schema: {
        tags: ['runs'],
        summary: 'List runs, newest first',
        querystring: RunListQuery,
        response: {
          200: RunPage,
          ...errorResponses(401, 422),
        },
      },
    },
    async (request) => runs.list(request.principal.workspaceId, request.query, agentKeyOf(request.principal)),
  );

  app.get(
    '/v1/runs/:run_id',
    {
      config: { auth: 'any', agent: true },
      schema: {
        tags: ['runs'],
        summary: 'A run with its steps and their decisions',
        params: RunParams,
        response: { 200: RunDetail, ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      const detail = await runs.detail(
        request.principal.workspaceId,
        pathUuid(request.params.run_id),
        agentKeyOf(request.principal),
      );
      if (detail === null) throw new ApiError('RUN_NOT_FOUND');
      // The answer comes as JSON bytes (runs.detail), so it skips the schema's serializer; the
      // schema documents it. Fastify sends a Buffer or a stream as it is once a JSON content type is
      // set. One page goes with its length. A large run's pages are read as the socket takes them,
      // not ahead (a high-water mark of one byte). A HEAD answer reads none: fastify would drain the
      // stream for nothing. The cast: the typed reply expects the object the bytes spell.
      reply.type('application/json; charset=utf-8');
      if (Array.isArray(detail)) {
        if (detail.length === 1) return reply.send(detail[0] as never);
        reply.header(
          'content-length',
          detail.reduce((bytes, chunk) => bytes + chunk.length, 0),
        );
        return reply.send(Readable.from(request.method === 'HEAD' ? [] : detail) as never);
      }
      const pieces = request.method === 'HEAD' ? [] : cutsLogged(detail, request);
      return reply.send(Readable.from(pieces, { objectMode: false, highWaterMark: 1 }) as never);
    },
  );
};
