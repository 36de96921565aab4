// Placeholder: being written.
import { Empty } from "../components/ui";

export function ExperimentPage() {
  return <Empty>Experiment: coming.</Empty>;
}
