/**
 * A loopback OTLP/HTTP collector for tests: takes `/v1/traces` and `/v1/metrics` as JSON (what
 * the OTLP/HTTP JSON exporters send) and keeps the spans and metric names, attributes decoded.
 * Protobuf is refused (415): a test that gets it learns the exporter changed its encoding.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  status: { code?: number; message?: string };
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
}

export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  /** Metric names received, with the attribute sets of their data points. */
  metrics: Map<string, Record<string, unknown>[]>;
  /** Status to answer with from now on (200: accept). */
  answer(status: number): void;
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };

function valueOf(value: AnyValue | undefined): unknown {
  if (!value) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  return value;
}

function attributesOf(list: { key: string; value: AnyValue }[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));
}

/** OTLP/JSON ids are hex; some encoders send base64: normalised to hex. */
function hexId(id: string | undefined): string {
  if (!id) return '';
  return /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex');
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const metrics = new Map<string, Record<string, unknown>[]>();
  let status = 200;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (status !== 200) {
        res.writeHead(status, { 'content-type': 'application/json' }).end('{}');
        return;
      }
      if (!/json/.test(String(req.headers['content-type']))) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (req.url === '/v1/traces') {
        for (const rs of body.resourceSpans ?? []) {
          const resource = attributesOf(rs.resource?.attributes);
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              spans.push({
                traceId: hexId(s.traceId),
                spanId: hexId(s.spanId),
                parentSpanId: hexId(s.parentSpanId),
                name: s.name,
                kind: s.kind,
                startTimeUnixNano: String(s.startTimeUnixNano),
                endTimeUnixNano: String(s.endTimeUnixNano),
                status: s.status ?? {},
                attributes: attributesOf(s.attributes),
                resource,
              });
            }
          }
        }
      } else if (req.url === '/v1/metrics') {
        for (const rm of body.resourceMetrics ?? []) {
          for (const sm of rm.scopeMetrics ?? []) {
            for (const m of sm.metrics ?? []) {
              const points = m.histogram?.dataPoints ?? m.sum?.dataPoints ?? m.gauge?.dataPoints ?? [];
              const seen = metrics.get(m.name) ?? [];
              for (const p of points)
                seen.push({ ...attributesOf(p.attributes), count: Number(p.count ?? 0), sum: p.sum });
              metrics.set(m.name, seen);
            }
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    metrics,
    answer: (next) => (status = next),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
