/**
 * A call decided before its record is durable, so the proxy can forward it while the record
 * commits. `decided` is final: the ids, the status, the decision. `recorded` settles once the
 * record is durable: with the record as written (a step's sequence is final only then), or with
 * the error the call would have failed with had it waited (RUN_NOT_RUNNING when the run ended
 * meanwhile, a database failure). Nothing may be released to the caller before it resolves.
 * Only a batched admission (admission-plan.ts) answers before its record commits.
 */
export interface Decided<T> {
  decided: T;
  recorded: Promise<T>;
}
