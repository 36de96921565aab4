// Routes of the dashboard UI. Every view keeps its state in the URL (filters,
// selected runs, chart settings) so it can be shared.
import { useEffect } from "react";
import { Route, Routes, useLocation, useNavigate } from "react-router-dom";
import { Layout } from "./components/Layout";
import { HomePage } from "./pages/Home";
import { ExperimentsPage } from "./pages/Experiments";
import { ExperimentPage } from "./pages/Experiment";
import { RunPage } from "./pages/Run";
import { ComparePage } from "./pages/Compare";
import { ModelsPage } from "./pages/Models";
import { ModelPage } from "./pages/Model";
import { TrainingPage } from "./pages/Training";
import { Empty } from "./components/ui";
import { mlflowLink } from "./mlflowLinks";

/** Sends a link from MLflow's client (a hash route of MLflow's UI) to fw's page for it. */
function MLflowLinks() {
  const { pathname, hash } = useLocation();
  const navigate = useNavigate();
  useEffect(() => {
    const to = pathname === "/" ? mlflowLink(hash) : null;
    if (to) navigate(to, { replace: true });
  }, [pathname, hash, navigate]);
  return null;
}

/** The whole UI. */
export function App() {
  return (
    <Layout>
      <MLflowLinks />
      <Routes>
        <Route path="/" element={<HomePage />} />
        <Route path="/experiments" element={<ExperimentsPage />} />
        <Route path="/experiments/:id" element={<ExperimentPage />} />
        <Route path="/runs/:id" element={<RunPage />} />
        <Route path="/compare" element={<ComparePage />} />
        <Route path="/models" element={<ModelsPage />} />
        <Route path="/models/:name" element={<ModelPage />} />
        <Route path="/training" element={<TrainingPage />} />
        <Route path="/training/:runId" element={<TrainingPage />} />
        <Route path="*" element={<Empty>No such page. Use the navigation above.</Empty>} />
      </Routes>
    </Layout>
  );
}
