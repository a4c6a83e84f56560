/** Spend and runs per day, drawn by uPlot (two scales: USD on the left, runs on the right). */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export function DailyChart({ days }: { days: { date: string; spend_usd: number; runs: number }[] }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const x = days.map((d) => Date.parse(`${d.date}T00:00:00Z`) / 1000);
    const bars = uPlot.paths.bars!({ size: [0.6, 24] });
    const plot = new uPlot(
      {
        width: Math.max(320, el.clientWidth),
        height: 240,
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
        // Half a day each side: the first and last days' bars are drawn whole.
        scales: {
          x: { time: true, range: (_u, min, max) => [min - 43_200, max + 43_200] },
          usd: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
          runs: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
        },
        series: [
          { label: 'Day (UTC)' },
          {
            label: 'Runs',
            scale: 'runs',
            stroke: '#94a3b8',
            fill: 'rgba(148,163,184,0.35)',
            paths: bars,
            points: { show: false },
            value: (_u, v) => (v == null ? '—' : String(v)),
          },
          {
            label: 'Spend (USD)',
            scale: 'usd',
            stroke: '#1d4ed8',
            width: 2,
            value: (_u, v) => (v == null ? '—' : `$${v.toFixed(4)}`),
          },
        ],
        axes: [
          { stroke: '#334155' },
          { scale: 'usd', stroke: '#1d4ed8', values: (_u, ticks) => ticks.map((t) => `$${t}`), size: 60 },
          { scale: 'runs', side: 1, stroke: '#475569', grid: { show: false } },
        ],
      },
      [x, days.map((d) => d.runs), days.map((d) => d.spend_usd)],
      el,
    );
    return () => plot.destroy();
  }, [JSON.stringify(days)]);
  return (
    <figure class="chart">
      <div ref={box} role="img" aria-label={`Spend and runs per day for the last ${days.length} days`} />
      <figcaption class="sr-only">
        {days
          .filter((d) => d.runs > 0 || d.spend_usd > 0)
          .map((d) => `${d.date}: ${d.runs} runs, $${d.spend_usd}`)
          .join('; ') || 'No runs in this period.'}
      </figcaption>
    </figure>
  );
}
