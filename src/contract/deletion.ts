/** What a deletion answers with, where it has more to say than 204. */
import { Type, type Static } from './typebox.js';
import { Count } from './common.js';
import { RETENTION_MIN_DAYS } from './retention.js';

export const UserDeletion = Type.Object({
  user_id: Type.String(),
  /** Runs deleted with the user (with their steps). */
  runs_deleted: Count,
});
export type UserDeletion = Static<typeof UserDeletion>;

/** Retention of ended runs: null keeps them forever. */
export const RetentionDays = Type.Union([Type.Integer({ minimum: RETENTION_MIN_DAYS, maximum: 36_500 }), Type.Null()]);
