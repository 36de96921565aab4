// The page frame: navigation, theme switch, the connection banner and the
// token prompt.
import { useEffect, useState, type ReactNode } from "react";
import { NavLink, useLocation } from "react-router-dom";
import { setToken } from "../api/client";
import { useConnection } from "../lib/hooks";

type Theme = "light" | "dark" | "system";

function applyTheme(t: Theme) {
  const root = document.documentElement;
  if (t === "system") root.removeAttribute("data-theme");
  else root.setAttribute("data-theme", t);
}

function ThemeSwitch() {
  const [theme, setTheme] = useState<Theme>(() => (localStorage.getItem("fw.theme") as Theme) || "system");
  useEffect(() => {
    applyTheme(theme);
    localStorage.setItem("fw.theme", theme);
  }, [theme]);
  const next: Record<Theme, Theme> = { system: "light", light: "dark", dark: "system" };
  return (
    <button type="button" className="ghost" onClick={() => setTheme(next[theme])} title="Switch theme (system, light, dark)">
      Theme: {theme}
    </button>
  );
}

/** The banner shown while the dashboard cannot be reached or wants a token. */
export function ConnectionBanner() {
  const c = useConnection();
  const [token, setTok] = useState("");
  if (c.needsToken) {
    return (
      <div className="banner banner-warn" role="alert">
        <form
          onSubmit={(e) => {
            e.preventDefault();
            setToken(token.trim());
            location.reload();
          }}
        >
          This dashboard needs its token (<code>--token</code> / <code>FW_DASHBOARD_TOKEN</code>).{" "}
          <label>
            Token <input type="password" value={token} onChange={(e) => setTok(e.target.value)} autoComplete="current-password" />
          </label>{" "}
          <button type="submit">Use token</button>
        </form>
      </div>
    );
  }
  if (!c.online) {
    return (
      <div className="banner banner-error" role="alert" data-testid="offline-banner">
        The dashboard cannot be reached. Reconnecting by itself… the data shown is from{" "}
        {c.lastOk ? new Date(c.lastOk).toLocaleTimeString() : "before"}.
      </div>
    );
  }
  return null;
}

/** The application frame around every page. */
export function Layout({ children }: { children: ReactNode }) {
  const { pathname } = useLocation();
  // A run and a comparison belong to Experiments in the navigation.
  const inExperiments = /^\/(experiments|runs|compare)(\/|$)/.test(pathname);
  return (
    <div className="app">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <span className="brand">fw</span>
        <nav aria-label="Main">
          <NavLink to="/" end>
            Home
          </NavLink>
          <NavLink to="/experiments" className={({ isActive }) => (isActive || inExperiments ? "active" : "")} aria-current={inExperiments ? "page" : undefined}>
            Experiments
          </NavLink>
          <NavLink to="/models">Models</NavLink>
          <NavLink to="/training">Training</NavLink>
        </nav>
        <span className="spacer" />
        <a className="ghost" href="/docs" target="_blank" rel="noreferrer">
          API docs
        </a>
        <ThemeSwitch />
      </header>
      <ConnectionBanner />
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </div>
  );
}
