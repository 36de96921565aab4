// Placeholder: being written.
import { Empty } from "../components/ui";

export function ComparePage() {
  return <Empty>Compare: coming.</Empty>;
}
