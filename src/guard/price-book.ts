/**
 * The active price of a workspace's model, as the daemon needs it before a record commits: a
 * result's pending spend, and (with `unpriced_models: "deny"`) whether a step's model is priced.
 * Remembered briefly: a price set through this daemon is seen at once (`changed`), one set
 * through another daemon within MAX_AGE_MS.
 */
import type { Queryable } from '../store/db.js';
import { activePrices } from '../store/pricing.js';
import type { TokenPrices } from '../money/cost.js';

const MAX_AGE_MS = 2_000;
const CAPACITY = 10_000;

interface Entry {
  loadedAt: number;
  prices: Promise<TokenPrices | null>;
  /** The prices once read (undefined until then). */
  value?: TokenPrices | null;
}

export class PriceBook {
  /** By workspace, then model: no key string made at each look-up (two a proxied call). */
  private readonly entries = new Map<string, Map<string, Entry>>();
  private size = 0;
  /** Bumped by `changed`: a load that began before a change does not outlive it. */
  private generation = 0;

  constructor(private readonly db: Queryable) {}

  /** The model's active prices; null when it has none (an unpriced model). */
  prices(workspaceId: string, model: string): Promise<TokenPrices | null> {
    let models = this.entries.get(workspaceId);
    const entry = models?.get(model);
    if (entry && performance.now() - entry.loadedAt <= MAX_AGE_MS) return entry.prices;
    const generation = this.generation;
    const prices = this.load(workspaceId, model);
    const fresh: Entry = { loadedAt: performance.now(), prices };
    // Full: forget everything (at most one load a model follows), rather than keep an order.
    if (!entry && this.size >= CAPACITY) {
      this.entries.clear();
      this.size = 0;
      models = undefined;
    }
    if (!models) this.entries.set(workspaceId, (models = new Map<string, Entry>()));
    if (!models.has(model)) this.size++;
    models.set(model, fresh);
    const forget = () => {
      const current = this.entries.get(workspaceId);
      if (current?.get(model) !== fresh) return;
      current.delete(model);
      this.size--;
      if (current.size === 0) this.entries.delete(workspaceId);
    };
    // A failed read is not remembered; nor one that a change overtook.
    prices.then((value) => {
      if (generation !== this.generation) forget();
      else fresh.value = value;
    }, forget);
    return prices;
  }

  /**
   * The model's active prices when already read and fresh, without a promise (every proxied
   * call asks twice: its estimate, its result's pending spend); undefined: ask `prices`.
   */
  known(workspaceId: string, model: string): TokenPrices | null | undefined {
    const entry = this.entries.get(workspaceId)?.get(model);
    if (entry === undefined || performance.now() - entry.loadedAt > MAX_AGE_MS) return undefined;
    return entry.value;
  }

  /** A workspace's prices changed (through this daemon): forget what was read before. */
  changed(workspaceId: string): void {
    this.generation++;
    this.size -= this.entries.get(workspaceId)?.size ?? 0;
    this.entries.delete(workspaceId);
  }

  /** Exact decimal text as Postgres writes a numeric: what callCost takes, digit for digit. */
  private async load(workspaceId: string, model: string): Promise<TokenPrices | null> {
    const row = await activePrices(this.db, workspaceId, model);
    if (!row) return null;
    const longContext =
      row.long_above === null
        ? null
        : {
            abovePromptTokens: Number(row.long_above),
            input: row.long_input!,
            output: row.long_output!,
            cacheRead: row.long_cache_read,
            cacheWrite: row.long_cache_write,
          };
    return {
      input: row.input,
      output: row.output,
      cacheRead: row.cache_read,
      cacheWrite: row.cache_write,
      longContext,
    };
  }
}
