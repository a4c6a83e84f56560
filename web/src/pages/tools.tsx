/** Tools: calls, denials, failures and spend per MCP tool (`{server}.{tool}`) over one local day. */
import { useState } from 'preact/hooks';
import { api, qs, type ToolUsage } from '../api';
import { ErrorNote, RankingTable } from '../components';
import { useLoad } from '../hooks';
import { int, usd } from '../format';

export function ToolsPage() {
  // An empty date asks for the workspace's today; `?date=` in the address opens another day.
  const [date, setDate] = useState(() => new URLSearchParams(window.location.search).get('date') ?? '');
  const usage = useLoad(() => api<ToolUsage>('GET', `/v1/tools/usage${qs({ date })}`), [date], 5000);
  return (
    <>
      <h1>Tools</h1>
      <div class="toolbar">
        <form class="filters" onSubmit={(e) => e.preventDefault()}>
          <label>
            Day <input type="date" value={date || usage.data?.date} onChange={(e) => setDate(e.currentTarget.value)} />
          </label>
        </form>
      </div>
      <ErrorNote error={usage.error} />
      {usage.data && (
        <>
          <p class="muted">
            Tool calls on {usage.data.date} (the workspace's local day). Denied calls never reached their server.
          </p>
          <RankingTable
            rows={usage.data.rows}
            rowKey={(row) => row.tool}
            empty="No tool calls on this day."
            columns={[
              { header: 'Tool', cell: (row) => <code>{row.tool}</code> },
              { header: 'Calls', numeric: true, cell: (row) => int(row.calls) },
              { header: 'Denied', numeric: true, cell: (row) => int(row.denied) },
              { header: 'Failed', numeric: true, cell: (row) => int(row.failed) },
              { header: 'Spend', numeric: true, cell: (row) => usd(row.spend_usd) },
            ]}
          />
        </>
      )}
    </>
  );
}
