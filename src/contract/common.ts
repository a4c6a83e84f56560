/** Schemas every resource shares: ids, counts, money, the error body. */
import { Type, type Static, type TSchema } from './typebox.js';

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

export const Uuid = Type.String({ format: 'uuid' });
/**
 * A UUID in a path: the 8-4-4-4-12 form in either case. A pattern, not ajv's `uuid` format, which
 * also takes a `urn:uuid:` prefix that Postgres refuses. Read it through `pathUuid`.
 */
export const UUID_PATTERN = '^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$';
export const UuidParam = Type.String({ pattern: UUID_PATTERN });
/**
 * One spelling for an id, lowercase as Postgres writes it: ids are compared as text once
 * Postgres has answered (a batch's answers, a run's next sequence), so an uppercase id would find
 * its own write unanswered.
 */
export const pathUuid = (value: string) => value.toLowerCase();
/** Big enough for any real count, small enough to stay exact in a JSON number and a bigint. */
export const Count = Type.Integer({ minimum: 0, maximum: 1_000_000_000_000 });
export const Usd = Type.Number({ minimum: 0, maximum: 1_000_000_000 });
export const Timestamp = Type.String({ format: 'date-time' });

export const ValidationIssue = Type.Object({ path: Type.String(), message: Type.String() });
export type ValidationIssue = Static<typeof ValidationIssue>;

/** The body of every non-2xx answer; a 422 adds `errors`. */
export const ErrorBody = Type.Object({
  detail: Type.String(),
  code: Type.String(),
  errors: Type.Optional(Type.Array(ValidationIssue)),
});
export type ErrorBody = Static<typeof ErrorBody>;

export const errorResponses = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((status) => [status, ErrorBody])) as Record<number, typeof ErrorBody>;

/**
 * The body of a write that takes no input: none, or `{}`. Anything else is a 422, as on every
 * write: a field the endpoint does not read (`workspace_id`, `name`) must not look accepted.
 */
export const NoBody = Nullable(Type.Object({}, { additionalProperties: false }));

/**
 * Arbitrary caller data (metadata, audit payloads). Typed as a record, so a reader can index it;
 * the JSON Schema is the plain object's (Unsafe adds nothing enumerable).
 */
export const JsonObject = Type.Unsafe<{ [key: string]: unknown }>(Type.Object({}, { additionalProperties: true }));
export type JsonObject = Static<typeof JsonObject>;

const PageFields = Type.Object({ total: Type.Integer(), page: Type.Integer(), per_page: Type.Integer() });

/** One page of a list: its items and where it sits. */
export const Page = <T extends TSchema>(item: T) => Type.Object({ items: Type.Array(item), ...PageFields.properties });
export type Page<T> = { items: T[] } & Static<typeof PageFields>;
