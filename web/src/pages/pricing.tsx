/**
 * Model prices. The API stores USD per token; the page shows and takes USD per million tokens, as
 * providers publish them (converted from the typed text, never by multiplying binary floats).
 */
import { useState } from 'preact/hooks';
import { api, ApiError, type Price, type PricingCatalog, type PricingImport } from '../api';
import { Card, ErrorNote } from '../components';
import { useLoad } from '../hooks';

/** Per-token to per-million, for display: 12 significant digits drop the binary product's noise. */
const perMillion = (perToken: number) => String(Number((perToken * 1e6).toPrecision(12)));
function perToken(text: string, label: string): number {
  const trimmed = text.trim();
  if (!/^\d+(\.\d+)?$/.test(trimmed)) throw new Error(`${label}: enter USD per million tokens, like 2.50.`);
  return Number(`${trimmed}e-6`);
}

function PriceForm({ initial, onSaved, submitLabel }: { initial?: Price; onSaved: () => void; submitLabel: string }) {
  const [model, setModel] = useState(initial?.model ?? '');
  const [input, setInput] = useState(initial ? perMillion(initial.input_cost_per_token) : '');
  const [output, setOutput] = useState(initial ? perMillion(initial.output_cost_per_token) : '');
  const [active, setActive] = useState(initial?.is_active ?? true);
  const [error, setError] = useState<Error | null>(null);
  const id = initial ? `price-${initial.model}` : 'price-new';
  const save = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      // A PUT replaces the entry whole: the prices this form does not show are sent as they are.
      const body = {
        input_cost_per_token: perToken(input, 'Input'),
        output_cost_per_token: perToken(output, 'Output'),
        cache_read_input_cost_per_token: initial?.cache_read_input_cost_per_token ?? null,
        cache_write_input_cost_per_token: initial?.cache_write_input_cost_per_token ?? null,
        long_context: initial?.long_context ?? null,
        is_active: active,
      };
      await api('PUT', `/v1/model-pricing/${encodeURIComponent(model.trim())}`, body);
      if (!initial) {
        setModel('');
        setInput('');
        setOutput('');
      }
      onSaved();
    } catch (e) {
      setError(e as Error);
    }
  };
  return (
    <form class="inline price" onSubmit={save}>
      {initial ? (
        <span class="model">{initial.model}</span>
      ) : (
        <label>
          Model <input required value={model} onInput={(e) => setModel(e.currentTarget.value)} />
        </label>
      )}
      <label>
        Input $/1M<span class="sr-only"> tokens{initial ? ` for ${initial.model}` : ''}</span>
        <input
          id={`${id}-in`}
          class="narrow"
          inputMode="decimal"
          required
          value={input}
          onInput={(e) => setInput(e.currentTarget.value)}
        />
      </label>
      <label>
        Output $/1M<span class="sr-only"> tokens{initial ? ` for ${initial.model}` : ''}</span>
        <input
          id={`${id}-out`}
          class="narrow"
          inputMode="decimal"
          required
          value={output}
          onInput={(e) => setOutput(e.currentTarget.value)}
        />
      </label>
      <label class="check">
        <input type="checkbox" checked={active} onChange={(e) => setActive(e.currentTarget.checked)} /> Active
      </label>
      <button type="submit">
        {submitLabel}
        <span class="sr-only">{initial ? ` ${initial.model}` : ''}</span>
      </button>
      <ErrorNote error={error} />
    </form>
  );
}

export function PricingPage() {
  const prices = useLoad(() => api<Price[]>('GET', '/v1/model-pricing'), []);
  const [importing, setImporting] = useState(false);
  const [imported, setImported] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const importCatalog = async () => {
    setImporting(true);
    setError(null);
    setImported('');
    try {
      const catalog = await api<PricingCatalog>('GET', '/v1/model-pricing/catalog');
      // One import: new models are added, catalog entries updated, prices set by hand kept.
      const models = catalog.models.map((m) => ({
        model: m.model,
        input_cost_per_token: m.input_cost_per_token,
        output_cost_per_token: m.output_cost_per_token,
        cache_read_input_cost_per_token: m.cache_read_input_cost_per_token ?? null,
        cache_write_input_cost_per_token: m.cache_write_input_cost_per_token ?? null,
        // The catalog's tier also says where it comes from (`from`), which the API does not take.
        long_context: m.long_context
          ? {
              above_prompt_tokens: m.long_context.above_prompt_tokens,
              input_cost_per_token: m.long_context.input_cost_per_token,
              output_cost_per_token: m.long_context.output_cost_per_token,
              cache_read_input_cost_per_token: m.long_context.cache_read_input_cost_per_token ?? null,
              cache_write_input_cost_per_token: m.long_context.cache_write_input_cost_per_token ?? null,
            }
          : null,
      }));
      const result = await api<PricingImport>('POST', '/v1/model-pricing/import', { models });
      setImported(
        `Imported the catalog${catalog.taken_at ? ` of ${catalog.taken_at}` : ''}: ${result.new} new, ${result.changed} changed, ` +
          `${result.unchanged} unchanged, ${result.kept} set by hand and kept.`,
      );
      void prices.reload();
    } catch (e) {
      setError(e as ApiError);
    } finally {
      setImporting(false);
    }
  };
  return (
    <>
      <h1>Pricing</h1>
      <p class="muted">
        USD per million tokens. A model call is priced by its model's active entry; without one it is recorded without
        cost.
      </p>
      <Card title="Import the catalog">
        <p>
          Load the list prices shipped with runguard. New models are added and earlier catalog prices updated; prices
          you set here are kept.
        </p>
        <button type="button" class="primary" disabled={importing} onClick={() => void importCatalog()}>
          {importing ? 'Importing…' : 'Import catalog'}
        </button>
        <span role="status"> {imported}</span>
        <ErrorNote error={error} />
      </Card>
      <Card title="Add a price">
        <PriceForm onSaved={() => void prices.reload()} submitLabel="Add price" />
      </Card>
      <Card title={prices.data ? `Prices (${prices.data.length})` : 'Prices'}>
        {!prices.data && !prices.error && <p class="muted">Loading…</p>}
        <ErrorNote error={prices.error} />
        {prices.data && prices.data.length === 0 && <p class="muted">No prices yet.</p>}
        <ul class="prices">
          {prices.data?.map((p) => (
            <li key={`${p.model}:${p.input_cost_per_token}:${p.output_cost_per_token}:${p.is_active}`}>
              <PriceForm initial={p} onSaved={() => void prices.reload()} submitLabel="Save" />
            </li>
          ))}
        </ul>
      </Card>
    </>
  );
}
