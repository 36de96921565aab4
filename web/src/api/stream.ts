// The live stream client (WS /api/training/stream, docs/stream.md): one
// WebSocket per page, subscriptions to runs or "*", the highest cursor kept
// so a reconnect (after a drop, a 4008 "too slow" close or a dashboard
// restart) resumes with `from` and loses nothing. A `gap` or a restarted
// dashboard (subscribed.cursor below our cursor) calls onResync so the page
// refetches over REST.
import { getToken } from "./client";

/** Event types the dashboard streams. */
export type StreamEventType = "metric" | "log" | "progress" | "status" | "system" | "export" | "deploy";

/** One streamed event. */
export interface StreamEvent {
  type: StreamEventType;
  cursor: number;
  run_id: string;
  seq: number;
  time: string;
  // The shape depends on type (docs/stream.md, "Events").
  data: Record<string, unknown>;
}

/** metric/system data. */
export interface ValuesData {
  step: number | null;
  values: Record<string, number | string>;
}

/** Options of a StreamClient. */
export interface StreamOptions {
  /** Run IDs, or "*" for every run. */
  runs: string[] | "*";
  onEvent: (e: StreamEvent) => void;
  /** Events were missed (gap, dashboard restart): refetch over REST. */
  onResync?: () => void;
  /** The socket opened (true) or dropped (false). */
  onState?: (connected: boolean) => void;
  /** Override for tests: builds the socket URL. */
  url?: string;
}

/** Turns a numeric JSON value ("NaN", "Infinity" included) into a number. */
export function num(v: unknown): number {
  if (typeof v === "number") return v;
  if (v === "NaN") return NaN;
  if (v === "Infinity") return Infinity;
  if (v === "-Infinity") return -Infinity;
  return Number(v);
}

/** The stream's URL on this page's origin, with the token for browsers. */
export function streamURL(): string {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const token = getToken();
  const q = token ? `?token=${encodeURIComponent(token)}` : "";
  return `${proto}//${location.host}/api/training/stream${q}`;
}

/** A self-reconnecting subscription to the live stream. */
export class StreamClient {
  private ws: WebSocket | null = null;
  private cursor = 0;
  private closed = false;
  private retry = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private opts: StreamOptions;

  constructor(opts: StreamOptions) {
    this.opts = opts;
    this.connect();
  }

  /** The highest cursor seen. */
  get lastCursor(): number {
    return this.cursor;
  }

  /** Changes the runs followed, keeping the connection and the cursor. */
  setRuns(runs: string[] | "*"): void {
    this.opts = { ...this.opts, runs };
    this.send();
  }

  /** Stops following and closes the socket for good. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.ws?.close(1000);
    this.ws = null;
  }

  private send(): void {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    const msg: { subscribe: string[] | "*"; from?: number } = { subscribe: this.opts.runs };
    if (this.cursor > 0) msg.from = this.cursor;
    this.ws.send(JSON.stringify(msg));
  }

  private connect(): void {
    if (this.closed) return;
    let ws: WebSocket;
    try {
      ws = new WebSocket(this.opts.url ?? streamURL());
    } catch {
      this.reconnectLater();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      this.retry = 0;
      this.opts.onState?.(true);
      this.send();
    };
    ws.onmessage = (m) => this.handle(String(m.data));
    ws.onclose = () => {
      if (this.ws === ws) this.ws = null;
      this.opts.onState?.(false);
      this.reconnectLater();
    };
    ws.onerror = () => ws.close();
  }

  private reconnectLater(): void {
    if (this.closed) return;
    const delay = Math.min(10_000, 250 * 2 ** this.retry) * (0.75 + Math.random() * 0.5);
    this.retry = Math.min(this.retry + 1, 6);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  private handle(text: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    const type = msg.type as string;
    switch (type) {
      case "subscribed": {
        const c = Number(msg.cursor);
        const from = msg.from == null ? null : Number(msg.from);
        if (from !== null && c < from) {
          // The dashboard restarted: its cursors began again at 1.
          this.cursor = c;
          this.opts.onResync?.();
        } else if (this.cursor === 0) {
          this.cursor = c;
        }
        return;
      }
      case "heartbeat":
        this.cursor = Math.max(this.cursor, Number(msg.cursor));
        return;
      case "gap":
        this.cursor = Math.max(this.cursor, Number(msg.cursor));
        this.opts.onResync?.();
        return;
      case "error":
        return;
      default: {
        const e = msg as unknown as StreamEvent;
        if (typeof e.cursor === "number") {
          if (e.cursor <= this.cursor) return; // already delivered before a reconnect
          this.cursor = e.cursor;
        }
        this.opts.onEvent(e);
      }
    }
  }
}
