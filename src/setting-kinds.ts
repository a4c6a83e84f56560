/**
 * The kinds of setting src/settings.ts declares (an integer in bounds, a flag, a base URL, ...),
 * built with TypeBox. What they accept, and the formats they use, are in src/setting-formats.ts.
 */
import { Type, type TSchema } from './contract/typebox.js';
import type { FormatName } from './setting-formats.js';

export const integer = (env: string, fallback: number, [minimum, maximum]: [number, number], description: string) =>
  Type.Integer({ env, default: fallback, minimum, maximum, description });

export const flag = (env: string, fallback: boolean, description: string) =>
  Type.Boolean({ env, default: fallback, description });

export const text = (env: string, fallback: string, description: string) =>
  Type.String({ env, default: fallback, minLength: 1, description });

export const oneOf = <const Values extends string[]>(
  env: string,
  values: readonly [...Values],
  fallback: Values[number],
  description: string,
) => Type.Enum(values, { env, default: fallback, description });

export const url = (env: string, fallback: string, description: string) =>
  Type.String({ env, default: fallback, format: 'http-base-url' satisfies FormatName, description });

/** A setting that may be left unset (null, or an empty variable): `description` says what unset means. */
export const optional = <Schema extends TSchema>(schema: Schema, env: string, description: string, extra = {}) =>
  Type.Union([schema, Type.Null()], { env, default: null, description, ...extra });
