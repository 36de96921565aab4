// Small building blocks shared by the pages: status badges, progress bars,
// error notes, dialogs, cards, key/value lists, tags and table headers.
import { useEffect, useRef, type ReactNode } from "react";
import { ApiError } from "../api/client";
import { fmtDuration } from "../lib/format";

/** A run, job or deployment status as a coloured badge. */
export function StatusBadge({ status }: { status: string | undefined }) {
  const s = status ?? "unknown";
  return (
    <span className={`badge badge-${s}`} data-status={s}>
      {s}
    </span>
  );
}

/** The run statuses, in the order their counts are shown. */
export const RUN_STATUSES = ["running", "queued", "finished", "failed", "stopped"];

/** Run counts by status as badges with the count ("running 2"), zero counts left out. */
export function StatusCounts({ counts }: { counts: Record<string, number> | undefined }) {
  return (
    <>
      {RUN_STATUSES.filter((s) => (counts?.[s] ?? 0) > 0).map((s) => (
        <span key={s} className="count-badge" title={`${counts?.[s]} ${s}`}>
          <StatusBadge status={s} /> {counts?.[s]}
        </span>
      ))}
    </>
  );
}

/** Tags as "key=value" chips. */
export function Tags({ tags }: { tags: Record<string, string> | null | undefined }) {
  return (
    <>
      {Object.entries(tags ?? {}).map(([k, v]) => (
        <span key={k} className="tag">
          {k}={v}
        </span>
      ))}
    </>
  );
}

/** A progress bar with percent and, when known, the ETA. */
export function ProgressBar({ value, total, eta, label }: { value: number; total: number; eta?: number | null; label?: string }) {
  const frac = total > 0 ? Math.min(1, Math.max(0, value / total)) : 0;
  const pct = Math.round(frac * 100);
  return (
    <div className="progress" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={pct} aria-label={label ?? "progress"}>
      <div className="progress-track">
        <div className="progress-fill" style={{ width: `${frac * 100}%` }} />
      </div>
      <span className="progress-text">
        {total > 0 ? `${value} / ${total} (${pct}%)` : "–"}
        {eta != null && eta >= 0 ? ` · ETA ${fmtDuration(eta)}` : ""}
      </span>
    </div>
  );
}

/** An API error with its code, message and details (how to fix the request). */
export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  const e = error instanceof ApiError ? error : new ApiError(0, "error", String(error));
  if (e.unreachable) return null; // the banner says it
  const details = Array.isArray(e.details) ? (e.details as unknown[]) : e.details ? [e.details] : [];
  return (
    <div className="error-note" role="alert">
      <strong>{e.message}</strong> <code>{e.code}</code>
      {details.length > 0 && (
        <ul>
          {details.map((d, i) => (
            <li key={i}>{typeof d === "string" ? d : JSON.stringify(d)}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** A modal dialog on <dialog>: Escape and the close button call onClose. */
export function Dialog({ open, title, onClose, children, footer }: { open: boolean; title: string; onClose: () => void; children: ReactNode; footer?: ReactNode }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) {
      if (typeof d.showModal === "function") d.showModal();
      else d.setAttribute("open", "");
    } else if (!open && d.open) {
      if (typeof d.close === "function") d.close();
      else d.removeAttribute("open");
    }
  }, [open]);
  return (
    <dialog ref={ref} className="dialog" aria-label={title} onCancel={(e) => { e.preventDefault(); onClose(); }}>
      {open && (
        <>
          <header className="dialog-head">
            <h2>{title}</h2>
            <button type="button" className="icon" aria-label="Close" onClick={onClose}>
              ×
            </button>
          </header>
          <div className="dialog-body">{children}</div>
          {footer && <footer className="dialog-foot">{footer}</footer>}
        </>
      )}
    </dialog>
  );
}

/**
 * A dialog whose footer is Cancel and one action button: confirming a delete,
 * stop or undeploy (tone "danger") or submitting a form (tone "primary"; with
 * `form` the button submits that form instead of calling onConfirm).
 */
export function ConfirmDialog({
  open,
  title,
  action,
  busyAction,
  busy = false,
  disabled = false,
  tone = "danger",
  form,
  onConfirm,
  onClose,
  cancelDisabled,
  children,
}: {
  open: boolean;
  title: string;
  /** The action button's text. */
  action: string;
  /** Its text while busy ("Deleting…"). */
  busyAction?: string;
  busy?: boolean;
  disabled?: boolean;
  tone?: "danger" | "primary";
  form?: string;
  onConfirm?: () => void;
  onClose: () => void;
  cancelDisabled?: boolean;
  children: ReactNode;
}) {
  return (
    <Dialog
      open={open}
      title={title}
      onClose={onClose}
      footer={
        <>
          <button type="button" onClick={onClose} disabled={cancelDisabled}>
            Cancel
          </button>
          <button type={form ? "submit" : "button"} form={form} className={tone} disabled={busy || disabled} onClick={form ? undefined : onConfirm}>
            {busy && busyAction ? busyAction : action}
          </button>
        </>
      }
    >
      {children}
    </Dialog>
  );
}

/** A titled panel. */
export function Card({ title, actions, children, className }: { title?: ReactNode; actions?: ReactNode; children: ReactNode; className?: string }) {
  return (
    <section className={`card ${className ?? ""}`}>
      {(title || actions) && (
        <header className="card-head">
          {title && <h2>{title}</h2>}
          {actions && <div className="card-actions">{actions}</div>}
        </header>
      )}
      {children}
    </section>
  );
}

/** A definition list of label/value pairs. */
export function KeyValues({ items }: { items: [string, ReactNode][] }) {
  return (
    <dl className="kv">
      {items.map(([k, v]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

/** The <option>s of a select whose values are also their labels. */
export function Options({ values }: { values: string[] }) {
  return (
    <>
      {values.map((v) => (
        <option key={v} value={v}>
          {v}
        </option>
      ))}
    </>
  );
}

/** A placeholder for an empty list, saying what to do. */
export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

/** A column header that sorts a table by its field when clicked (an arrow shows the direction); kind marks metric and param columns. */
export function SortHeader({ label, field, sort, desc, onSort, num, kind }: { label: string; field?: string; sort: string; desc: boolean; onSort: (f: string) => void; num?: boolean; kind?: "param" | "metric" }) {
  const active = field !== undefined && sort === field;
  return (
    <th scope="col" className={num ? "num" : undefined} aria-sort={active ? (desc ? "descending" : "ascending") : "none"} title={kind ? `${kind} ${label}` : undefined}>
      {field ? (
        <button type="button" className={`sort ${active ? "active" : ""}`} onClick={() => onSort(field)} aria-label={`Sort by ${kind ? `${kind} ` : ""}${label}`}>
          {kind && <span className={`colkind colkind-${kind}`}>{kind === "metric" ? "m" : "p"}</span>}
          <span className="sort-label">{label}</span>
          <span className="sort-arrow" aria-hidden="true">
            {active ? (desc ? "▼" : "▲") : ""}
          </span>
        </button>
      ) : (
        label
      )}
    </th>
  );
}
