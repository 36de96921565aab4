// The dashboard API client: one fetch wrapper that adds the token, turns
// every non-2xx answer into an ApiError (the API's one error shape), and
// tracks whether the dashboard can be reached so the UI can show a banner
// and retry by itself instead of showing empty tables.

import type { ApiErrorBody } from "./types";

/** The API's error body: {"error": {"code", "message", "details"}} (the document's Error). */
export type ErrorBody = ApiErrorBody;

/** A refused request (non-2xx) or an unreachable dashboard (status 0). */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: unknown;
  constructor(status: number, code: string, message: string, details?: unknown) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
  /** True when the dashboard could not be reached at all. */
  get unreachable(): boolean {
    return this.status === 0;
  }
}

const TOKEN_KEY = "fw.token";

/** The dashboard token (set when the dashboard runs with --token). */
export function getToken(): string {
  try {
    return localStorage.getItem(TOKEN_KEY) ?? "";
  } catch {
    return "";
  }
}

/** Remembers the token for later visits ("" forgets it). */
export function setToken(token: string): void {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: the token lasts for this page only */
  }
  connection.set({ ...connection.get(), needsToken: false });
}

/** What the UI knows about its connection to the dashboard. */
export interface ConnectionState {
  /** False after a request failed to reach the dashboard, until one succeeds. */
  online: boolean;
  /** True after a 401: the UI asks for the token. */
  needsToken: boolean;
  /** When the dashboard was last reached (ms since epoch), 0 if never. */
  lastOk: number;
}

type Listener = (s: ConnectionState) => void;

/** A tiny observable holding the connection state. */
class Observable<T> {
  private value: T;
  private listeners = new Set<(v: T) => void>();
  constructor(v: T) {
    this.value = v;
  }
  get(): T {
    return this.value;
  }
  set(v: T): void {
    this.value = v;
    for (const l of this.listeners) l(v);
  }
  subscribe(l: (v: T) => void): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }
}

/** The connection state shared by every request and the stream. */
export const connection = new Observable<ConnectionState>({ online: true, needsToken: false, lastOk: 0 });

export type { Listener as ConnectionListener };

function markOnline(): void {
  const s = connection.get();
  if (!s.online || s.lastOk === 0 || Date.now() - s.lastOk > 1000) connection.set({ ...s, online: true, lastOk: Date.now() });
}

function markOffline(): void {
  const s = connection.get();
  if (s.online) connection.set({ ...s, online: false });
}

/** Query parameters: undefined, null and "" are left out. */
export type Query = Record<string, string | number | boolean | undefined | null>;

/** Builds "path?query" with the empty parameters left out. */
export function withQuery(path: string, query?: Query): string {
  if (!query) return path;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null || v === "") continue;
    q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** Options of one request. */
export interface RequestOptions {
  query?: Query;
  /** A JSON body (sent as application/json) or a FormData / Blob as is. */
  body?: unknown;
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

/** Sends one request with the token; an unreachable dashboard is an ApiError of status 0. */
async function send(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { Accept: "application/json", ...opts.headers };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  let body: BodyInit | undefined;
  if (opts.body instanceof FormData || opts.body instanceof Blob) {
    body = opts.body;
  } else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["Content-Type"] = "application/json";
  }
  try {
    return await fetch(withQuery(path, opts.query), { method, headers, body, signal: opts.signal });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    markOffline();
    throw new ApiError(0, "unreachable", "The dashboard cannot be reached; retrying.");
  }
}

/** Parses a JSON body (undefined when empty or not JSON). */
function parseJSON(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The ApiError for a non-2xx answer whose body was parsed. */
function failure(res: Response, parsed: unknown): ApiError {
  const err = (parsed as ErrorBody | undefined)?.error;
  // A proxy in front of a stopped dashboard answers 502/504 without our shape.
  if (!err && (res.status === 502 || res.status === 504)) {
    markOffline();
    return new ApiError(0, "unreachable", "The dashboard cannot be reached; retrying.");
  }
  markOnline();
  if (res.status === 401) connection.set({ ...connection.get(), needsToken: true });
  if (err && typeof err === "object") {
    return new ApiError(res.status, err.code ?? "error", err.message ?? res.statusText, err.details);
  }
  return new ApiError(res.status, "error", `${res.status} ${res.statusText}`);
}

/** Sends one request to the dashboard and decodes its JSON answer. */
export async function request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
  const res = await send(method, path, opts);
  const parsed = parseJSON(await res.text());
  if (!res.ok) throw failure(res, parsed);
  markOnline();
  return parsed as T;
}

/** GET path and decode JSON. */
export const get = <T>(path: string, query?: Query, signal?: AbortSignal) =>
  request<T>("GET", path, { query, signal });
/** POST a JSON body. */
export const post = <T>(path: string, body?: unknown, query?: Query) => request<T>("POST", path, { body, query });
/** PATCH a JSON body. */
export const patch = <T>(path: string, body: unknown) => request<T>("PATCH", path, { body });
/** DELETE path. */
export const del = <T>(path: string) => request<T>("DELETE", path);

/** Encodes one path segment (IDs and names come from users). */
export const seg = (s: string) => encodeURIComponent(s);

/**
 * Saves a file the API serves as an attachment (a run's checkpoint or
 * artifact). A plain link could not send the token, so the file is fetched
 * with it and handed to the browser as a blob.
 */
export async function download(path: string, query: Query, filename: string): Promise<void> {
  const res = await send("GET", path, { query });
  if (!res.ok) throw failure(res, parseJSON(await res.text()));
  markOnline();
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
