// Placeholder: being written.
import { Empty } from "../components/ui";

export function ExperimentsPage() {
  return <Empty>Experiments: coming.</Empty>;
}
