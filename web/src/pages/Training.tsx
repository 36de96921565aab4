// Placeholder: being written.
import { Empty } from "../components/ui";

export function TrainingPage() {
  return <Empty>Training: coming.</Empty>;
}
