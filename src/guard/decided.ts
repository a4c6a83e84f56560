/**
 * A call decided before its record is durable, so the proxy can forward it while the record
 * commits. `decided` is final: the ids, the status, the decision. `recorded` settles once the
 * record is durable: with the record as written (a step's sequence is final only then), or with
 * the error the call would have failed with had it waited (RUN_NOT_RUNNING when the run ended
 * meanwhile, a database failure). Nothing may be released to the caller before it resolves.
 */
export interface Decided<T> {
  decided: T;
  recorded: Promise<T>;
}

/**
 * Runs `record`, which tells its decision once the decision is made and its record submitted,
 * and answers then; a failure before the decision (an unknown run, the database down) rejects.
 */
export function decidedBeforeRecorded<T>(
  record: (whenDecided: (decided: T) => void) => Promise<T>,
): Promise<Decided<T>> {
  let told!: (decided: T) => void;
  const decision = new Promise<T>((resolve) => (told = resolve));
  const recorded = record(told);
  return Promise.race([decision, recorded]).then((decided) => ({ decided, recorded }));
}
