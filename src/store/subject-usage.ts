/**
 * The subjects a step's spend counts against beside its workspace and user (budgets of scope
 * `key` and `tag`): the API key that made it, and each tag of its run. Named as the counters name
 * them (`subjectOf`): `key:<api key id>`, `tag:<name>:<value>`.
 */

/**
 * SQL (a text[]) of the subjects of a step (`step`, with its `api_key_id`) of a run (`run`, with
 * its `tags`): its key's, then its run's tags' (`tag:<name>:<value>`; a name has no `:`).
 */
export const STEP_SUBJECTS = (step: string, run: string): string =>
  `(array_remove(ARRAY['key:' || ${step}.api_key_id::text], NULL) ||
    coalesce((SELECT array_agg('tag:' || t.key || ':' || t.value) FROM jsonb_each_text(${run}.tags) AS t), '{}'))`;
