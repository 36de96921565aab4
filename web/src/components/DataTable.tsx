// The plain tables of the pages: a header row from column specs, the rows as
// children, numeric columns right-aligned, optionally in a scrolling wrapper.
import type { ReactNode } from "react";

/** A column: its header (text or markup) and whether it holds numbers. */
export type Column = ReactNode | { label: ReactNode; num: true };

/** A right-aligned (numeric) column. */
export function numCol(label: ReactNode): Column {
  return { label, num: true };
}

function isNum(c: Column): c is { label: ReactNode; num: true } {
  return typeof c === "object" && c !== null && "num" in c && (c as { num?: unknown }).num === true;
}

/** A table with one header row (a column header per column) and the given body rows. */
export function DataTable({
  columns,
  className,
  label,
  scroll,
  children,
}: {
  columns: Column[];
  /** Classes besides "table". */
  className?: string;
  /** The table's accessible name. */
  label?: string;
  /** The class of a horizontally scrolling wrapper ("table-wrap", "hscroll"); none without. */
  scroll?: string;
  children: ReactNode;
}) {
  const table = (
    <table className={className ? `table ${className}` : "table"} aria-label={label}>
      <thead>
        <tr>
          {columns.map((c, i) =>
            isNum(c) ? (
              <th key={i} scope="col" className="num">
                {c.label}
              </th>
            ) : (
              <th key={i} scope="col">
                {c}
              </th>
            ),
          )}
        </tr>
      </thead>
      <tbody>{children}</tbody>
    </table>
  );
  return scroll ? <div className={scroll}>{table}</div> : table;
}
