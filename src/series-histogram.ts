/**
 * A Prometheus histogram whose series are found by their label values. prom-client's own builds a
 * string of the labels (and checks their names) at every observation to find its series: a
 * proxied call observes four histograms, and that was 0.7-1.6 KB of garbage a call. This one
 * remembers each series once prom-client has made it, and counts into it in place, so the
 * exposition is prom-client's, unchanged: test/unit/series-histogram.test.ts holds the two to
 * the same text.
 */
import { Histogram, type HistogramConfiguration, type LabelValues } from 'prom-client';

/** prom-client's record of one series (lib/histogram.js, 15.x: `createBaseValues`). */
interface SeriesRecord {
  labels: LabelValues<string>;
  bucketValues: Record<string, number>;
  sum: number;
  count: number;
}

/** What this class reads of prom-client's histogram beyond its typings. */
interface HistogramInternals {
  hashMap: Record<string, SeriesRecord>;
  upperBounds: readonly number[];
}

/** Label values by label, in the order of the label names; a leaf is its series' record. */
type SeriesTree = Map<string | number | undefined, SeriesTree | SeriesRecord>;

export class SeriesHistogram<T extends string> extends Histogram<T> {
  private readonly names: readonly T[];
  private readonly boundKeys: readonly string[];
  private series: SeriesTree = new Map();

  constructor(config: Omit<HistogramConfiguration<T>, 'enableExemplars' | 'collect'>) {
    super(config);
    this.names = config.labelNames ?? [];
    const internals = this as unknown as HistogramInternals;
    this.boundKeys = internals.upperBounds.map(String);
    // prom-client sets `observe` on each instance: this class's takes its place.
    const observeOnce = this.observe.bind(this) as (labels: LabelValues<T>, value: number) => void;
    this.observe = ((labels: LabelValues<T>, value: number) => {
      const record = this.find(labels);
      if (record === undefined || !Number.isFinite(value)) {
        // A series' first observation (or a bad one) goes through prom-client's checks.
        observeOnce(labels, value);
        this.remember(labels);
        return;
      }
      record.sum += value;
      record.count += 1;
      const bound = this.boundIndex(value);
      if (bound >= 0) record.bucketValues[this.boundKeys[bound]!]! += 1;
    }) as Histogram<T>['observe'];
  }

  override reset(): void {
    super.reset();
    // Constructing calls reset before this class's fields are set.
    if (this.series) this.series = new Map();
  }

  override zero(labels: LabelValues<T>): void {
    super.zero(labels);
    this.series = new Map();
  }

  override remove(...values: string[]): void;
  override remove(labels: LabelValues<T>): void;
  override remove(...values: unknown[]): void {
    (Histogram.prototype.remove as (...args: unknown[]) => void).apply(this, values);
    this.series = new Map();
  }

  /** The first bound at or above `value` (prom-client's `findBound`); -1: above them all. */
  private boundIndex(value: number): number {
    const bounds = (this as unknown as HistogramInternals).upperBounds;
    for (let i = 0; i < bounds.length; i++) if (value <= bounds[i]!) return i;
    return -1;
  }

  private find(labels: LabelValues<T>): SeriesRecord | undefined {
    if (typeof labels !== 'object' || labels === null) return undefined;
    let node: SeriesTree | SeriesRecord | undefined = this.series;
    for (const name of this.names) {
      if (!(node instanceof Map)) return undefined;
      node = node.get(labels[name]);
    }
    return node instanceof Map ? undefined : node;
  }

  /** Remembers the record prom-client keeps for `labels` (the same values, as its hash compares them). */
  private remember(labels: LabelValues<T>): void {
    if (typeof labels !== 'object' || labels === null) return;
    const records = Object.values((this as unknown as HistogramInternals).hashMap);
    const record = records.find((candidate) =>
      this.names.every((name) => `${candidate.labels[name]}` === `${labels[name]}`),
    );
    if (record === undefined || this.names.length === 0) return;
    let node = this.series;
    for (const name of this.names.slice(0, -1)) {
      let next = node.get(labels[name]);
      if (!(next instanceof Map)) node.set(labels[name], (next = new Map()));
      node = next;
    }
    node.set(labels[this.names.at(-1)!], record);
  }
}
