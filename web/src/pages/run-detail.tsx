/** One run: its decision, metadata, and its steps as a timeline with their decisions and data. */
import { Link } from 'wouter-preact';
import { api, type RunDetail, type Step } from '../api';
import { Card, ErrorNote, JsonView, Rules, Status, Tags } from '../components';
import { useLoad } from '../hooks';
import { costWithUnpriced, duration, int, isUnpriced, usd, when } from '../format';

function StepItem({ step }: { step: Step }) {
  const tokens =
    step.prompt_tokens === null && step.completion_tokens === null
      ? '—'
      : `${int(step.prompt_tokens ?? 0)} in / ${int(step.completion_tokens ?? 0)} out`;
  return (
    <li class={`step step-${step.status.toLowerCase()}`}>
      <div class="step-head">
        <span class="seq">#{step.sequence}</span>
        <strong>{step.type}</strong>
        <span>{step.model ?? step.tool_name ?? ''}</span>
        <Status value={step.status} />
      </div>
      <dl class="facts">
        <div>
          <dt>At</dt>
          <dd>{when(step.created_at)}</dd>
        </div>
        <div>
          <dt>Duration</dt>
          <dd>{duration(step.duration_ms)}</dd>
        </div>
        <div>
          <dt>Tokens</dt>
          <dd>{tokens}</dd>
        </div>
        <div>
          <dt>Cost</dt>
          <dd>{isUnpriced(step) ? 'unpriced' : usd(step.cost_usd)}</dd>
        </div>
      </dl>
      <Rules decision={step.decision} />
      {(step.input_data != null || step.output_data != null) && (
        <details>
          <summary>Input and output data</summary>
          <JsonView label={`Step ${step.sequence} input`} value={step.input_data} />
          <JsonView label={`Step ${step.sequence} output`} value={step.output_data} />
        </details>
      )}
    </li>
  );
}

/** The limits that applied to a run, in words: `20 steps, $0.50, 3 identical calls in a row`; `none`. */
function runLimits(limits: RunDetail['limits']): string {
  const parts = [
    limits.max_steps !== null ? `${int(limits.max_steps)} steps` : null,
    limits.max_cost_usd !== null ? usd(limits.max_cost_usd) : null,
    limits.max_identical_calls !== null ? `${int(limits.max_identical_calls)} identical calls in a row` : null,
  ].filter((part) => part !== null);
  return parts.length > 0 ? parts.join(', ') : 'none';
}

export function RunDetailPage({ id }: { id: string }) {
  // Live: steps of a running run appear as they are made.
  const run = useLoad(() => api<RunDetail>('GET', `/v1/runs/${encodeURIComponent(id)}`), [id], 2000);
  const r = run.data;
  return (
    <>
      <p>
        <Link href="/runs">← All runs</Link>
      </p>
      <h1>
        Run <code>{id}</code>
      </h1>
      <ErrorNote error={run.error} />
      {r && (
        <>
          <dl class="facts summary">
            <div>
              <dt>User</dt>
              <dd>{r.user_id}</dd>
            </div>
            <div>
              <dt>Status</dt>
              <dd>
                <Status value={r.status} />
              </dd>
            </div>
            <div>
              <dt>Started</dt>
              <dd>{when(r.started_at)}</dd>
            </div>
            <div>
              <dt>Ended</dt>
              <dd>{when(r.ended_at)}</dd>
            </div>
            <div>
              <dt>Duration</dt>
              <dd>{duration(r.duration_ms)}</dd>
            </div>
            <div>
              <dt>Steps</dt>
              <dd>{int(r.step_count)}</dd>
            </div>
            <div>
              <dt>Tokens</dt>
              <dd>{int(r.total_tokens)}</dd>
            </div>
            <div>
              <dt>Cost</dt>
              <dd>{costWithUnpriced(r.total_cost_usd, r.steps.filter(isUnpriced).length)}</dd>
            </div>
            <div>
              <dt>Tags</dt>
              <dd>
                <Tags tags={r.tags} />
              </dd>
            </div>
            {/* Fixed at the run's start; an older daemon's answer has none. */}
            {r.limits && (
              <div>
                <dt>Limits</dt>
                <dd>{runLimits(r.limits)}</dd>
              </div>
            )}
          </dl>
          <div class="grid2">
            <Card title="Run start decision">
              <Rules decision={r.decision} />
            </Card>
            <Card title="Metadata">
              <JsonView label="Run metadata" value={r.metadata} />
            </Card>
          </div>
          <Card title={`Steps (${r.steps.length})`}>
            {r.steps.length === 0 ? (
              <p class="muted">No steps yet.</p>
            ) : (
              <ol class="timeline">
                {r.steps.map((s) => (
                  <StepItem key={s.id} step={s} />
                ))}
              </ol>
            )}
          </Card>
        </>
      )}
    </>
  );
}
