// Placeholder: being written.
import { Empty } from "../components/ui";

export function RunPage() {
  return <Empty>Run: coming.</Empty>;
}
