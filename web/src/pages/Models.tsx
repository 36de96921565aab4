// Placeholder: being written.
import { Empty } from "../components/ui";

export function ModelsPage() {
  return <Empty>Models: coming.</Empty>;
}
