/** Tool prices as the API sets and lists them: USD per call, exact decimals below the wire. */
import type { ToolPrice } from '../contract/index.js';
import type { Clock } from '../clock.js';
import { ApiError } from '../errors.js';
import { decimalText, numericToUsd } from '../money/decimal.js';
import type { Db } from '../store/db.js';
import { deleteToolPrice, listToolPrices, putToolPrice, type ToolPriceRow } from '../store/tool-pricing.js';

const view = (row: ToolPriceRow): ToolPrice => ({
  pattern: row.pattern,
  per_call_usd: numericToUsd(row.per_call_usd)!,
  updated_at: row.updated_at.toISOString(),
});

export class ToolPrices {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  async set(workspaceId: string, pattern: string, perCallUsd: number): Promise<ToolPrice> {
    return view(await putToolPrice(this.db, workspaceId, pattern, decimalText(perCallUsd), this.clock.now()));
  }

  async list(workspaceId: string): Promise<ToolPrice[]> {
    return (await listToolPrices(this.db, workspaceId)).map(view);
  }

  async remove(workspaceId: string, pattern: string): Promise<void> {
    if (!(await deleteToolPrice(this.db, workspaceId, pattern)))
      throw new ApiError('NOT_FOUND', `The workspace has no tool price for "${pattern}".`);
  }
}
