// Placeholder: being written.
import { Empty } from "../components/ui";

export function HomePage() {
  return <Empty>Home: coming.</Empty>;
}
