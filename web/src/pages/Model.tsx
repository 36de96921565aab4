// Placeholder: being written.
import { Empty } from "../components/ui";

export function ModelPage() {
  return <Empty>Model: coming.</Empty>;
}
