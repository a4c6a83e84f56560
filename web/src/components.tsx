/** Small pieces the pages share. Every value from the API is rendered as text (JSX children). */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { ApiError, Decision } from './api';
import { share } from './format';

export function ErrorNote({ error }: { error: ApiError | Error | null | undefined }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error.message}
    </p>
  );
}

export function Status({ value }: { value: string }) {
  return <span class={`badge badge-${value.toLowerCase()}`}>{value}</span>;
}

/** A run's tags as `key=value` chips, text only (they are whatever the caller sent); `none` when it has none. */
export function Tags({ tags }: { tags: Record<string, string> | undefined }) {
  const pairs = Object.entries(tags ?? {}).sort(([left], [right]) => (left < right ? -1 : 1));
  if (pairs.length === 0) return <span class="muted">none</span>;
  return (
    <ul class="tags" aria-label="Tags">
      {pairs.map(([key, value]) => (
        <li key={key} class="tag">
          <span class="tag-key">{key}</span>=<span class="tag-value">{value}</span>
        </li>
      ))}
    </ul>
  );
}

/** A used-of-limit bar with its numbers in words (the bar alone would say nothing to a screen reader). */
export function Meter({ label, used, of, text }: { label: string; used: number; of: number | null; text: string }) {
  const fraction = share(used, of);
  const level = fraction === null ? 'none' : fraction >= 1 ? 'over' : fraction >= 0.8 ? 'high' : 'ok';
  return (
    <div class="meter">
      <div class="meter-label">{label}</div>
      <div class="meter-value">{text}</div>
      {fraction !== null && (
        <progress class={`meter-bar meter-${level}`} max={1} value={fraction} aria-label={`${label}: ${text}`} />
      )}
    </div>
  );
}

export function Card({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  const headingId = `card-${(id ?? title).toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return (
    <section class="card" aria-labelledby={headingId}>
      <h2 id={headingId}>{title}</h2>
      {children}
    </section>
  );
}

/** A table column's header; a numeric column is aligned right, header and cells alike. */
export interface ColumnHead {
  header: string;
  numeric?: boolean;
}

/** A column of a {@link RankingTable}: its head and what each row shows in it. */
export interface Column<Row> extends ColumnHead {
  cell: (row: Row) => ComponentChildren;
}

export function TableHead({ columns }: { columns: ColumnHead[] }) {
  return (
    <thead>
      <tr>
        {columns.map((column) => (
          <th key={column.header} scope="col" class={column.numeric ? 'num' : undefined}>
            {column.header}
          </th>
        ))}
      </tr>
    </thead>
  );
}

/** A short ranked list as a table, or a sentence saying why there is nothing to rank. */
export function RankingTable<Row>({
  rows,
  rowKey,
  columns,
  empty,
}: {
  rows: Row[];
  rowKey: (row: Row) => string;
  columns: Column<Row>[];
  empty: string;
}) {
  if (rows.length === 0) return <p class="muted">{empty}</p>;
  return (
    <table>
      <TableHead columns={columns} />
      <tbody>
        {rows.map((row) => (
          <tr key={rowKey(row)}>
            {columns.map((column) => (
              <td key={column.header} class={column.numeric ? 'num' : undefined}>
                {column.cell(row)}
              </td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** JSON shown as text, indented, in a scrollable block. */
export function JsonView({ value, label }: { value: unknown; label: string }) {
  if (value === null || value === undefined) return <p class="muted">{label}: none</p>;
  return (
    <figure class="json">
      <figcaption>{label}</figcaption>
      <pre tabIndex={0} aria-label={label}>
        {JSON.stringify(value, null, 2)}
      </pre>
    </figure>
  );
}

export function Rules({ decision }: { decision: Decision }) {
  const rules = Object.entries(decision.evaluated_rules ?? {});
  // A denial's numbers (the contract's `decision.detail`, where the daemon sends it).
  const detail = (decision as { detail?: unknown }).detail;
  return (
    <div class="decision">
      <p>
        <strong>Decision:</strong>{' '}
        <span class={decision.outcome === 'ALLOW' ? 'ok-text' : 'deny-text'}>{decision.outcome}</span>
        {decision.reason && (
          <>
            {' '}
            — <code>{decision.reason}</code>
          </>
        )}
      </p>
      {rules.length > 0 && (
        <ol class="rules" aria-label="Evaluated rules, in order">
          {rules.map(([rule, outcome]) => (
            <li key={rule} class={outcome === 'DENY' ? 'rule-deny' : 'rule-pass'}>
              <code>{rule}</code> <span>{outcome}</span>
            </li>
          ))}
        </ol>
      )}
      {detail !== undefined && detail !== null && <JsonView label="Decision detail" value={detail} />}
    </div>
  );
}

/** A modal that asks before something that cannot be taken back. Native <dialog>: focus and Escape work. */
export function Confirm({
  open,
  title,
  children,
  confirmLabel,
  danger,
  onConfirm,
  onCancel,
}: {
  open: boolean;
  title: string;
  children: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (open && !dialog.open) dialog.showModal();
    if (!open && dialog.open) dialog.close();
  }, [open]);
  return (
    <dialog
      ref={ref}
      aria-labelledby="confirm-title"
      onCancel={(e) => {
        e.preventDefault();
        onCancel();
      }}
    >
      <h2 id="confirm-title">{title}</h2>
      <div>{children}</div>
      <div class="actions">
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
        <button type="button" class={danger ? 'danger' : 'primary'} onClick={onConfirm}>
          {confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

export function Pager({
  page,
  perPage,
  total,
  onPage,
  label,
}: {
  page: number;
  perPage: number;
  total: number;
  onPage: (p: number) => void;
  label: string;
}) {
  const pages = Math.max(1, Math.ceil(total / perPage));
  return (
    <nav class="pager" aria-label={`${label} pages`}>
      <button type="button" disabled={page <= 1} onClick={() => onPage(page - 1)}>
        Previous
      </button>
      <span aria-live="polite">
        Page {page} of {pages} ({total} in all)
      </span>
      <button type="button" disabled={page >= pages} onClick={() => onPage(page + 1)}>
        Next
      </button>
    </nav>
  );
}

/**
 * A secret shown once (a new API key, a webhook's signing secret): in component state only (never
 * stored), gone when dismissed or the page is left. `id` names its field and heading.
 */
export function SecretOnce({
  id,
  title,
  label,
  secret,
  children,
  onDone,
}: {
  id: string;
  title: string;
  label: string;
  secret: string;
  children: ComponentChildren;
  onDone: () => void;
}) {
  const [copied, setCopied] = useState('');
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied('Copied.');
    } catch {
      setCopied('Copying is not allowed here: select the text and copy it.');
    }
  };
  return (
    <div class="key-once" role="region" aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>{title}</h2>
      <p>{children}</p>
      <label for={id} class="sr-only">
        {label}
      </label>
      <input id={id} class="key" readOnly value={secret} onFocus={(e) => e.currentTarget.select()} />
      <div class="actions">
        <button type="button" class="primary" onClick={() => void copy()}>
          Copy
        </button>
        <button type="button" onClick={onDone}>
          Done, I saved it
        </button>
        <span role="status">{copied}</span>
      </div>
    </div>
  );
}
