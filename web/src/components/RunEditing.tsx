// Editing a run from its page, as MLflow and W&B users expect: rename, tags
// (chips with a remove button, an add form), free-text notes kept in the
// run's `note` tag, and a hard delete after typing the run's name. Every
// change is a PATCH /api/runs/{id} (tags: a value sets, null removes) or the
// DELETE; the API's refusals are shown with ErrorNote.
import { useState, type FormEvent } from "react";
import { useNavigate } from "react-router-dom";
import { del, patch, seg } from "../api/client";
import type { Body, Run } from "../api/types";
import { useAction } from "../lib/hooks";
import { ConfirmDialog, ErrorNote } from "./ui";

/** The tag that holds the run's notes (not shown among the tag chips). */
export const NOTE_TAG = "note";
/** The store's limit on a tag value, in UTF-8 bytes (store.MaxTagValueLen). */
export const MAX_TAG_VALUE_BYTES = 4096;
/** The store's limit on a tag key, in UTF-8 bytes (store.MaxKeyLen). */
export const MAX_TAG_KEY_BYTES = 250;

// The store refuses control characters other than tab in tag values, line
// breaks included, so a note keeps its line breaks as U+2028 LINE SEPARATOR
// (which Python's str.splitlines() also splits on).
const LINE_SEP = "\u2028";
/** A note as typed (newlines) to its tag value. */
export const encodeNote = (text: string) => text.replace(/\r\n?|\n/g, LINE_SEP);
/** A `note` tag value to the text shown and edited (newlines). */
export const decodeNote = (value: string) => value.replaceAll(LINE_SEP, "\n");

const bytes = (s: string) => new TextEncoder().encode(s).length;

type RunPatch = Body<"/api/runs/{id}", "patch">;

function patchRun(run: Run, body: RunPatch): Promise<Run> {
  return patch<Run>(`/api/runs/${seg(run.id)}`, body);
}

/** The header's Rename… and Delete run… buttons and their dialogs. */
export function RunEditActions({ run, onChanged }: { run: Run; onChanged: () => void }) {
  const [renaming, setRenaming] = useState(false);
  const [deleting, setDeleting] = useState(false);
  return (
    <>
      <button type="button" onClick={() => setRenaming(true)}>
        Rename…
      </button>
      <button type="button" className="danger-outline" onClick={() => setDeleting(true)}>
        Delete run…
      </button>
      {renaming && <RenameRunDialog run={run} onClose={() => setRenaming(false)} onSaved={onChanged} />}
      {deleting && <DeleteRunDialog run={run} onClose={() => setDeleting(false)} />}
    </>
  );
}

/** Renames the run; the API checks the name (characters, length). */
export function RenameRunDialog({ run, onClose, onSaved }: { run: Run; onClose: () => void; onSaved: () => void }) {
  const [name, setName] = useState(run.name);
  const save = useAction();
  const trimmed = name.trim();
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!trimmed || trimmed === run.name) return;
    void save.run(async () => {
      await patchRun(run, { name: trimmed } satisfies RunPatch);
      onSaved();
      onClose();
    });
  };
  return (
    <ConfirmDialog open title="Rename run" action="Rename" busyAction="Renaming…" tone="primary" form="run-rename-form" busy={save.busy} disabled={!trimmed || trimmed === run.name} onClose={onClose}>
      <form id="run-rename-form" className="run-edit-form" onSubmit={submit}>
        <label htmlFor="run-rename-name">Name</label>
        <input id="run-rename-name" value={name} maxLength={128} autoFocus onChange={(e) => setName(e.target.value)} />
        <p className="hint">1 to 128 letters, digits, spaces and . _ - / : + = @</p>
      </form>
      <ErrorNote error={save.error} />
    </ConfirmDialog>
  );
}

/** Deletes the run for good after its name is typed, then opens its experiment. */
export function DeleteRunDialog({ run, onClose }: { run: Run; onClose: () => void }) {
  const [typed, setTyped] = useState("");
  const remove = useAction();
  const navigate = useNavigate();
  return (
    <ConfirmDialog
      open
      title="Delete run"
      action="Delete for good"
      busyAction="Deleting…"
      busy={remove.busy}
      disabled={typed !== run.name}
      cancelDisabled={remove.busy}
      onClose={onClose}
      onConfirm={() =>
        void remove.run(async () => {
          await del(`/api/runs/${seg(run.id)}`);
          navigate(`/experiments/${encodeURIComponent(run.experiment_id)}`);
        })
      }
    >
      <div className="run-edit-form">
        <p>
          This deletes the run <strong>{run.name}</strong> of {run.experiment} for good: its metrics, logs, checkpoints and artifacts are removed. It cannot be undone.
        </p>
        <label htmlFor="run-delete-confirm">Type the run name to confirm</label>
        <input id="run-delete-confirm" value={typed} autoComplete="off" spellCheck={false} onChange={(e) => setTyped(e.target.value)} />
      </div>
      <ErrorNote error={remove.error} />
    </ConfirmDialog>
  );
}

/** The run's tags (all but the note) as chips with a remove button, and a form to add one. */
export function RunTagsEditor({ run, onChanged }: { run: Run; onChanged: () => void }) {
  const tags = Object.entries(run.tags ?? {})
    .filter(([k]) => k !== NOTE_TAG)
    .sort(([a], [b]) => a.localeCompare(b));
  const [adding, setAdding] = useState(false);
  const [key, setKey] = useState("");
  const [value, setValue] = useState("");
  const [removing, setRemoving] = useState<string>();
  const action = useAction();
  const k = key.trim();
  const keyProblem = !k
    ? undefined
    : k === NOTE_TAG
      ? "The note tag holds the run's notes: use Edit notes."
      : bytes(k) > MAX_TAG_KEY_BYTES
        ? `A key is at most ${MAX_TAG_KEY_BYTES} bytes.`
        : bytes(value) > MAX_TAG_VALUE_BYTES
          ? `A value is at most ${MAX_TAG_VALUE_BYTES} bytes.`
          : undefined;

  const remove = (tag: string) => {
    setRemoving(tag);
    void action
      .run(async () => {
        await patchRun(run, { tags: { [tag]: null } } satisfies RunPatch);
        onChanged();
      })
      .finally(() => setRemoving(undefined));
  };
  const add = (e: FormEvent) => {
    e.preventDefault();
    if (!k || keyProblem) return;
    void action.run(async () => {
      await patchRun(run, { tags: { [k]: value } } satisfies RunPatch);
      setKey("");
      setValue("");
      setAdding(false);
      onChanged();
    });
  };
  return (
    <div className="run-tags">
      <ul className="run-tag-list" aria-label="Tags">
        {tags.map(([t, v]) => (
          <li key={t} className="tag run-tag">
            <span className="run-tag-text" title={`${t}=${v}`}>
              {t}={v}
            </span>
            <button type="button" className="run-tag-remove" aria-label={`Remove tag ${t}`} title={`Remove tag ${t}`} disabled={removing === t} onClick={() => remove(t)}>
              ×
            </button>
          </li>
        ))}
        {tags.length === 0 && !adding && <li className="muted small run-tag-none">No tags.</li>}
      </ul>
      {!adding ? (
        <button type="button" className="ghost run-tag-add" aria-expanded={false} onClick={() => setAdding(true)}>
          <span aria-hidden="true">+ </span>Add tag
        </button>
      ) : (
        <form className="run-tag-form" aria-label="Add tag" onSubmit={add}>
          <label htmlFor="run-tag-key">Key</label>
          <input id="run-tag-key" value={key} autoFocus size={14} onChange={(e) => setKey(e.target.value)} aria-invalid={!!keyProblem || undefined} />
          <label htmlFor="run-tag-value">Value</label>
          <input id="run-tag-value" value={value} size={18} onChange={(e) => setValue(e.target.value)} />
          <button type="submit" className="primary" disabled={!k || !!keyProblem || action.busy}>
            Add
          </button>
          <button
            type="button"
            onClick={() => {
              setAdding(false);
              setKey("");
              setValue("");
            }}
          >
            Cancel
          </button>
          {keyProblem && <span className="run-tag-problem">{keyProblem}</span>}
        </form>
      )}
      <ErrorNote error={action.error} />
    </div>
  );
}

/** The run's notes (its `note` tag) with an Edit notes button; saving an empty note removes the tag. */
export function RunNotes({ run, onChanged }: { run: Run; onChanged: () => void }) {
  const current = decodeNote(run.tags?.[NOTE_TAG] ?? "");
  const [editing, setEditing] = useState(false);
  const [text, setText] = useState(current);
  const save = useAction();
  const encoded = encodeNote(text.trim() ? text : "");
  const size = bytes(encoded);
  const tooLong = size > MAX_TAG_VALUE_BYTES;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (tooLong) return;
    void save.run(async () => {
      await patchRun(run, { tags: { [NOTE_TAG]: encoded ? encoded : null } } satisfies RunPatch);
      setEditing(false);
      onChanged();
    });
  };
  return (
    <section className="run-notes" aria-label="Notes">
      {!editing ? (
        <div className="run-notes-view">
          {current ? <p className="run-notes-text">{current}</p> : <p className="muted run-notes-text">No notes.</p>}
          <button
            type="button"
            className="ghost run-notes-edit"
            onClick={() => {
              setText(current);
              setEditing(true);
            }}
          >
            Edit notes
          </button>
        </div>
      ) : (
        <form className="run-notes-form" onSubmit={submit}>
          <label htmlFor="run-notes-text">Notes</label>
          <textarea id="run-notes-text" rows={4} value={text} maxLength={MAX_TAG_VALUE_BYTES} autoFocus aria-describedby="run-notes-size" onChange={(e) => setText(e.target.value)} />
          <div className="row">
            <span id="run-notes-size" className={`small ${tooLong ? "run-notes-over" : "muted"}`}>
              {size} / {MAX_TAG_VALUE_BYTES} bytes
              {!text.trim() && current ? " · saving an empty note removes it" : ""}
            </span>
            <span className="spacer" />
            <button
              type="button"
              disabled={save.busy}
              onClick={() => {
                save.reset();
                setEditing(false);
              }}
            >
              Cancel
            </button>
            <button type="submit" className="primary" disabled={save.busy || tooLong}>
              Save
            </button>
          </div>
          <ErrorNote error={save.error} />
        </form>
      )}
    </section>
  );
}
