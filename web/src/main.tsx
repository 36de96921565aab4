import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { BrowserRouter } from "react-router-dom";
import { App } from "./App";
import "./styles.css";

// A token in the URL (?token=...) is remembered and removed from the address bar.
const params = new URLSearchParams(location.search);
const token = params.get("token");
if (token) {
  localStorage.setItem("fw.token", token);
  params.delete("token");
  const q = params.toString();
  history.replaceState(null, "", location.pathname + (q ? `?${q}` : "") + location.hash);
}
const theme = localStorage.getItem("fw.theme");
if (theme === "light" || theme === "dark") document.documentElement.setAttribute("data-theme", theme);

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <BrowserRouter>
      <App />
    </BrowserRouter>
  </StrictMode>,
);
