/** Per-workspace model pricing: USD per token, stored as exact NUMERIC. */
import { randomUUID } from 'node:crypto';
import { decimalText, numericToUsd } from '../money/decimal.js';
import type { ModelPricing } from '../contract/pricing.js';
import type { Queryable } from './db.js';

export type { ModelPricing };

function toPricing(row: Record<string, unknown>): ModelPricing {
  return {
    id: String(row.id),
    model: String(row.model),
    input_cost_per_token: numericToUsd(row.input_cost_per_token as string)!,
    output_cost_per_token: numericToUsd(row.output_cost_per_token as string)!,
    is_active: Boolean(row.is_active),
  };
}

export async function listActivePricing(db: Queryable, workspaceId: string): Promise<ModelPricing[]> {
  const { rows } = await db.query(
    'SELECT * FROM model_pricing WHERE workspace_id = $1 AND is_active ORDER BY model',
    [workspaceId],
  );
  return rows.map(toPricing);
}

export interface PricingInput {
  input_cost_per_token: number;
  output_cost_per_token: number;
  is_active: boolean;
}

export async function upsertPricing(
  db: Queryable,
  workspaceId: string,
  model: string,
  input: PricingInput,
  now: Date,
): Promise<ModelPricing> {
  const { rows } = await db.query(
    `INSERT INTO model_pricing AS p (id, workspace_id, model, input_cost_per_token, output_cost_per_token, is_active, created_at, updated_at)
     VALUES ($1, $2, $3, $4::numeric, $5::numeric, $6, $7, $7)
     ON CONFLICT (workspace_id, model) DO UPDATE SET input_cost_per_token = EXCLUDED.input_cost_per_token,
       output_cost_per_token = EXCLUDED.output_cost_per_token, is_active = EXCLUDED.is_active, updated_at = $7
     RETURNING *`,
    [randomUUID(), workspaceId, model, decimalText(input.input_cost_per_token), decimalText(input.output_cost_per_token),
      input.is_active, now],
  );
  return toPricing(rows[0]!);
}
