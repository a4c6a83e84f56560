/**
 * SeriesHistogram against prom-client's Histogram: the same observations give the same exposition
 * text, byte for byte, whatever the label values, their order, or a value past every bucket.
 */
import fc from 'fast-check';
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SeriesHistogram } from '../../src/series-histogram.js';

const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.1, 1, 2.5, 10];

function twins(labelNames: readonly ('method' | 'route' | 'status_code')[]) {
  const plain = new Registry();
  const ours = new Registry();
  plain.setDefaultLabels({ instance: 'a' });
  ours.setDefaultLabels({ instance: 'a' });
  const config = { name: 'h_seconds', help: 'Help with "quotes" and \\ a backslash', buckets: BUCKETS, labelNames };
  return {
    plain: new Histogram({ ...config, registers: [plain] }),
    ours: new SeriesHistogram({ ...config, registers: [ours] }),
    texts: async () => [await plain.metrics(), await ours.metrics()],
  };
}

const observation = fc.record({
  labels: fc.record({
    method: fc.constantFrom('GET', 'POST'),
    route: fc.constantFrom('/v1/runs', '/proxy/openai/*', 'unmatched', 'a "quoted" \\ route'),
    status_code: fc.constantFrom<string | number>('200', 200, '403', '502'),
  }),
  value: fc.oneof(fc.double({ min: 0, max: 20, noNaN: true }), fc.constantFrom(0, 0.001, 1, 10, 10.5)),
});

describe('SeriesHistogram', () => {
  it('when random observations are made, then its text is prom-client histogram text', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(observation, { maxLength: 60 }), async (observations) => {
        const { plain, ours, texts } = twins(['method', 'route', 'status_code']);
        for (const { labels, value } of observations) {
          plain.observe(labels, value);
          ours.observe(labels, value);
        }
        const [expected, actual] = await texts();
        expect(actual).toBe(expected);
      }),
      { numRuns: 200 },
    );
  });

  it('when labels come in another key order, or it is reset, then it still counts as prom-client does', async () => {
    const { plain, ours, texts } = twins(['method', 'route']);
    for (const histogram of [plain, ours]) {
      histogram.observe({ route: '/a', method: 'GET' }, 0.002);
      histogram.observe({ method: 'GET', route: '/a' }, 0.2);
      histogram.startTimer({ method: 'POST', route: '/b' })();
    }
    // The timer's value differs between the two: compare what does not depend on it.
    const [before, after] = (await texts()).map((text) =>
      text.split('\n').filter((line) => line.includes('route="/a"')),
    );
    expect(after).toEqual(before);
    expect(after!.length).toBeGreaterThan(0);
    plain.reset();
    ours.reset();
    plain.observe({ method: 'GET', route: '/a' }, 3);
    ours.observe({ method: 'GET', route: '/a' }, 3);
    const [expected, actual] = await texts();
    expect(actual).toBe(expected);
  });

  it('when a value is not a number, or a label is not its own, then it throws as prom-client does', () => {
    const { plain, ours } = twins(['method']);
    ours.observe({ method: 'GET' }, 1);
    expect(() => plain.observe({ method: 'GET' }, Number.NaN)).toThrow(TypeError);
    expect(() => ours.observe({ method: 'GET' }, Number.NaN)).toThrow(TypeError);
    expect(() => ours.observe({ nope: 'x' } as never, 1)).toThrow(/not included/);
  });
});
