/** Today against the budgets and limits, 30 days of spend and runs, and where today's money and denials went. */
import { Link } from 'wouter-preact';
import { api, type Overview, type Usage } from '../api';
import { Card, ErrorNote, Meter, RankingTable } from '../components';
import { DailyChart } from '../chart';
import { useLoad } from '../hooks';
import { int, limit, usd } from '../format';

export function OverviewPage() {
  const usage = useLoad(() => api<Usage>('GET', '/v1/usage?days=30'), [], 2000);
  const overview = useLoad(() => api<Overview>('GET', '/v1/overview'), [], 2000);
  const u = usage.data;
  const o = overview.data;
  return (
    <>
      <h1>Overview</h1>
      <ErrorNote error={usage.error ?? overview.error} />
      {u && (
        <div class="grid3">
          <Meter
            label="Spend today"
            used={u.workspace_daily_spend_usd}
            of={u.workspace_daily_budget_usd}
            text={`${usd(u.workspace_daily_spend_usd)} of ${limit(u.workspace_daily_budget_usd, usd)}`}
          />
          <Meter
            label="Runs this month"
            used={u.monthly_runs}
            of={u.monthly_run_limit}
            text={`${int(u.monthly_runs)} of ${limit(u.monthly_run_limit)}`}
          />
          <Meter
            label="Running now"
            used={u.concurrent_runs}
            of={u.max_concurrent_runs}
            text={`${int(u.concurrent_runs)} of ${limit(u.max_concurrent_runs)}`}
          />
        </div>
      )}
      {o && o.unpriced_calls.length > 0 && (
        <div class="banner banner-warn" role="status">
          <strong>Unpriced model calls today:</strong>{' '}
          {o.unpriced_calls
            .map((c) => `${c.model} (${int(c.calls)} ${c.calls === 1 ? 'call' : 'calls'}, ${int(c.tokens)} tokens)`)
            .join(', ')}
          . Their cost is not counted. <Link href="/pricing">Add prices</Link>
        </div>
      )}
      <Card title="Spend and runs per day (30 days, UTC)">{u ? <DailyChart days={u.daily} /> : <p>Loading…</p>}</Card>
      {o && (
        <div class="grid3">
          <Card title="Denials today by reason">
            <RankingTable
              rows={o.denials_by_reason}
              rowKey={(denial) => denial.reason}
              empty="No denials today."
              columns={[
                { header: 'Reason', cell: (denial) => <code>{denial.reason}</code> },
                { header: 'Count', numeric: true, cell: (denial) => int(denial.count) },
              ]}
            />
          </Card>
          <Card title="Top users today by spend">
            <RankingTable
              rows={o.top_users}
              rowKey={(user) => user.user_id}
              empty="No user activity today."
              columns={[
                {
                  header: 'User',
                  cell: (user) => (
                    <Link href={`/runs?user_id=${encodeURIComponent(user.user_id)}`}>{user.user_id}</Link>
                  ),
                },
                { header: 'Spend', numeric: true, cell: (user) => usd(user.spend_usd) },
                { header: 'Runs', numeric: true, cell: (user) => int(user.runs) },
              ]}
            />
          </Card>
          <Card title="Top models today by spend">
            <RankingTable
              rows={o.top_models}
              rowKey={(model) => model.model}
              empty="No priced calls today."
              columns={[
                { header: 'Model', cell: (model) => model.model },
                { header: 'Spend', numeric: true, cell: (model) => usd(model.spend_usd) },
                { header: 'Calls', numeric: true, cell: (model) => int(model.calls) },
              ]}
            />
          </Card>
        </div>
      )}
    </>
  );
}
