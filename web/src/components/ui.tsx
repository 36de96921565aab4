// Small building blocks shared by the pages: status badges, progress bars,
// error notes, dialogs, cards and key/value lists.
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

/** A placeholder for an empty list, saying what to do. */
export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}
