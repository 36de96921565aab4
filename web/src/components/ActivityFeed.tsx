// Recent activity (GET /api/activity): runs started, finished, failed and
// stopped, exports and deployments, newest first, with links to the run or
// model; refreshed every 5 s and whenever `bump` changes (stream events).
import { useEffect } from "react";
import { Link } from "react-router-dom";
import { get, seg } from "../api/client";
import { fmtAgo, fmtTime } from "../lib/format";
import { useApi, useNow } from "../lib/hooks";
import { Empty, ErrorNote } from "./ui";
import type { ActivityEvent, ActivityList } from "../api/types";

const ICONS: Record<string, { icon: string; tone: string }> = {
  run_started: { icon: "▶", tone: "info" },
  run_finished: { icon: "✓", tone: "ok" },
  run_failed: { icon: "✕", tone: "bad" },
  run_stopped: { icon: "■", tone: "warn" },
  export_started: { icon: "⇪", tone: "info" },
  export_finished: { icon: "⇪", tone: "ok" },
  export_failed: { icon: "⇪", tone: "bad" },
  deployed: { icon: "◉", tone: "ok" },
  undeployed: { icon: "○", tone: "warn" },
};

/** The link target of an event: its run, else its model. */
export function activityLink(e: ActivityEvent): string | undefined {
  if (e.kind.startsWith("run_") && e.run_id) return `/runs/${seg(e.run_id)}`;
  if (e.model) return `/models/${seg(e.model)}`;
  if (e.run_id) return `/runs/${seg(e.run_id)}`;
  return undefined;
}

/** The feed. */
export function ActivityFeed({ limit = 30, bump = 0 }: { limit?: number; bump?: number }) {
  const act = useApi((s) => get<ActivityList>("/api/activity", { limit }, s), [limit], 5000);
  const now = useNow(5000);
  const { reload } = act;
  useEffect(() => {
    if (bump > 0) reload();
  }, [bump, reload]);

  const events = act.data?.events ?? [];
  return (
    <div className="activity">
      <ErrorNote error={act.error} />
      {act.data && events.length === 0 && <Empty>Nothing yet. Start a training job and its activity shows here.</Empty>}
      <ol className="activity-list" aria-label="recent activity">
        {events.map((e, i) => {
          const look = ICONS[e.kind] ?? { icon: "•", tone: "info" };
          const to = activityLink(e);
          return (
            <li key={`${e.time}-${e.kind}-${i}`} className={`activity-item tone-${look.tone}`}>
              <span className="activity-icon" aria-hidden="true">
                {look.icon}
              </span>
              <span className="activity-text">
                {to ? <Link to={to}>{e.message}</Link> : e.message}
                {e.experiment && !e.message.includes(e.experiment) && <span className="muted"> · {e.experiment}</span>}
              </span>
              <time className="muted small" dateTime={e.time} title={fmtTime(e.time)}>
                {fmtAgo(e.time, now)}
              </time>
            </li>
          );
        })}
      </ol>
    </div>
  );
}
