/**
 * Colour for people at a terminal, never for scripts: on when the stream is a terminal, off under
 * NO_COLOR (no-color.org: any non-empty value) and in pipes or files; FORCE_COLOR turns it on
 * where no terminal is seen (CI logs that render colour).
 */
export interface Style {
  readonly enabled: boolean;
  /** Denials, blocks, failures, a kill switch that is on: what must stand out. */
  bad(text: string): string;
  /** Runs still going, warnings. */
  warn(text: string): string;
  good(text: string): string;
  dim(text: string): string;
}

const paint = (enabled: boolean, open: number, close: number) => (text: string) =>
  enabled && text !== '' ? `\u001b[${open}m${text}\u001b[${close}m` : text;

export function colourWanted(stream: NodeJS.WritableStream, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '' && env.FORCE_COLOR !== '0') return true;
  return (stream as { isTTY?: boolean }).isTTY === true && env.TERM !== 'dumb';
}

export function createStyle(enabled: boolean): Style {
  return {
    enabled,
    bad: paint(enabled, 31, 39),
    warn: paint(enabled, 33, 39),
    good: paint(enabled, 32, 39),
    dim: paint(enabled, 2, 22),
  };
}

/** The text a terminal shows: without colour codes, for measuring columns. */
export function visible(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\u001b\[[0-9;]*m/g, '');
}

/** A status or decision word, coloured by what it means. */
export function statusWord(style: Style, word: string): string {
  if (/^(BLOCKED|DENY|FAILED)\b/.test(word)) return style.bad(word);
  if (word === 'RUNNING') return style.warn(word);
  if (word === 'COMPLETED') return style.good(word);
  return word;
}
