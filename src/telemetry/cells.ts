// Hot-path metric cells. prom-client's own `labels(...).inc()` hashes the label object into a
// string and validates it on every call, and its histogram allocates on every observe: too much
// for a counter bumped per journal entry. Here a label set is bound once to a cell (plain
// numbers, a Float64Array of bucket counts); the families below hand prom-client's Registry
// the values in its own shape only when /metrics is scraped.

export type Labels = Readonly<Record<string, string>>;

/** What prom-client's Registry reads from a metric at scrape time (`metric.get()`). */
export interface CollectedMetric {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  values: Array<{ labels: Labels; value: number; metricName?: string }>;
  aggregator: 'sum';
}

/** A metric prom-client's Registry can register: a name, and its values on demand. */
export interface ScrapedMetric {
  readonly name: string;
  readonly help: string;
  readonly type: CollectedMetric['type'];
  get(): CollectedMetric | Promise<CollectedMetric>;
}

/** A counter (or gauge) value under one bound label set. */
export class Cell {
  value = 0;
  constructor(readonly labels: Labels) {}
  inc(n = 1): void {
    this.value += n;
  }
}

/** Counters or gauges sharing a name: one cell per label set, bound by the caller once. */
export class CellFamily implements ScrapedMetric {
  private readonly cells: Cell[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'gauge' = 'counter',
  ) {}

  cell(labels: Labels = {}): Cell {
    const c = new Cell(labels);
    this.cells.push(c);
    return c;
  }

  get(): CollectedMetric {
    return { name: this.name, help: this.help, type: this.type, values: this.cells.map((c) => ({ labels: c.labels, value: c.value })), aggregator: 'sum' };
  }
}

/** Histogram observations under one bound label set: per-bucket counts (not cumulative), sum, count. */
export class HistogramCell {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Labels,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    if (i < b.length) this.counts[i]! += 1;
    this.sum += value;
    this.count += 1;
  }
}

export class HistogramFamily implements ScrapedMetric {
  readonly type = 'histogram';
  private readonly cells: HistogramCell[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly bounds: readonly number[],
  ) {}

  cell(labels: Labels = {}): HistogramCell {
    const c = new HistogramCell(labels, this.bounds);
    this.cells.push(c);
    return c;
  }

  /** Cumulative `_bucket{le}` series, then `_sum` and `_count`, as Prometheus expects them. */
  get(): CollectedMetric {
    const values: CollectedMetric['values'] = [];
    for (const c of this.cells) {
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += c.counts[i]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { ...c.labels, le: String(le) }, value: cumulative });
      });
      values.push({ metricName: `${this.name}_bucket`, labels: { ...c.labels, le: '+Inf' }, value: c.count });
      values.push({ metricName: `${this.name}_sum`, labels: c.labels, value: c.sum });
      values.push({ metricName: `${this.name}_count`, labels: c.labels, value: c.count });
    }
    return { name: this.name, help: this.help, type: 'histogram', values, aggregator: 'sum' };
  }
}

/** Gauges read from their sources at scrape time (queue depths, sizes): nothing on the hot path. */
export class SampledGauge implements ScrapedMetric {
  readonly type: 'gauge' | 'counter' = 'gauge';

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly sample: () => Array<[Labels, number]> | Promise<Array<[Labels, number]>>,
  ) {}

  async get(): Promise<CollectedMetric> {
    const samples = await this.sample();
    return { name: this.name, help: this.help, type: this.type, values: samples.map(([labels, value]) => ({ labels, value })), aggregator: 'sum' };
  }
}

/** A count kept by its source (a client's requests) and read at scrape time. */
export class SampledCounter extends SampledGauge {
  override readonly type = 'counter';
}

/** Latency buckets in seconds: 1 ms to 5 min, dense where the hot path lives. */
export const SECONDS_BUCKETS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
/** Store write latency in seconds: 50 µs to 1 s (an fsync is ~0.3 ms here). */
export const WRITE_SECONDS_BUCKETS: readonly number[] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
/** Commands per log batch: 1 to the batch cap (1024). */
export const BATCH_COMMANDS_BUCKETS: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/** Bytes of log records per batch: 64 B to 16 MiB. */
export const BATCH_BYTES_BUCKETS: readonly number[] = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216];

/**
 * One metric's values with other threads' values of the same metric added, series by series
 * (every family here sums: counters, gauges of queue depths, histogram buckets, sums and counts).
 */
export function sumCollected(own: CollectedMetric, others: readonly CollectedMetric[]): CollectedMetric {
  if (others.length === 0) return own;
  const series = new Map<string, CollectedMetric['values'][number]>();
  for (const m of [own, ...others]) {
    for (const v of m.values) {
      const key = `${v.metricName ?? ''}\u0000${JSON.stringify(v.labels)}`;
      const seen = series.get(key);
      if (seen === undefined) series.set(key, { ...v });
      else seen.value += v.value;
    }
  }
  return { ...own, values: [...series.values()] };
}
