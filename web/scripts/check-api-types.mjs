#!/usr/bin/env node
// Keeps the web UI's API types generated, "not written twice by hand": fails
// when a file under src/pages or src/components declares an interface or
// type alias that looks like an API body, i.e. one named like a schema of
// the dashboard's OpenAPI document (dashboard/api/openapi.json
// components.schemas: Run, Job, ...) or ending in Info, Lite, Answer or Body
// (the names hand-written API types used to have). Such types belong in
// src/api/types.ts, as names for the generated src/api/schema.d.ts.
//
// Usage: node scripts/check-api-types.mjs (npm run check:types); exit 1 and
// file:line: why, and the fix, for each offending declaration.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const web = join(dirname(fileURLToPath(import.meta.url)), "..");
const docPath = join(web, "..", "dashboard", "api", "openapi.json");
const dirs = ["src/pages", "src/components"];
const SUFFIX = /(Info|Lite|Answer|Body)$/;
// `interface X`, `type X =`, `type X<T> =`, exported or not, at any depth.
const DECL = /^\s*(?:export\s+)?(?:declare\s+)?(interface|type)\s+([A-Za-z_$][\w$]*)\b(?!\s*,)/;

const schemas = new Set(Object.keys(JSON.parse(readFileSync(docPath, "utf8")).components?.schemas ?? {}));
if (schemas.size === 0) {
  console.error(`check-api-types: no components.schemas in ${relative(process.cwd(), docPath)}`);
  process.exit(2);
}

/** Every .ts/.tsx file under dir. */
function files(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return files(p);
    return /\.tsx?$/.test(e.name) && !e.name.endsWith(".d.ts") ? [p] : [];
  });
}

const problems = [];
for (const dir of dirs) {
  for (const file of files(join(web, dir))) {
    const lines = readFileSync(file, "utf8").split("\n");
    lines.forEach((text, i) => {
      const m = DECL.exec(text);
      if (!m) return;
      const [, kind, name] = m;
      const where = `${relative(process.cwd(), file)}:${i + 1}`;
      if (schemas.has(name)) {
        problems.push(
          `${where}: ${kind} ${name} redeclares the OpenAPI schema ${name}.\n` +
            `  fix: delete it and use the generated type: import type { ${name} } from "../api/types" (add \`export type ${name} = S["${name}"];\` to src/api/types.ts if it is missing).`,
        );
      } else if (SUFFIX.test(name)) {
        problems.push(
          `${where}: ${kind} ${name} looks like a hand-written API body (…Info/…Lite/…Answer/…Body).\n` +
            `  fix: use a type from src/api/types.ts: a schema (Run, Job, ...) or a path body, e.g. Answer<"/api/runs/{id}/logs", "get"> / Body<"/api/training/start", "post">; ` +
            `if the server sends more than the document says, fix dashboard/api/openapi.json and run \`npm run gen:api\`. A UI-only type needs a name that does not end in Info/Lite/Answer/Body.`,
        );
      }
    });
  }
}

if (problems.length > 0) {
  console.error(problems.join("\n"));
  console.error(`\ncheck-api-types: ${problems.length} hand-written API type${problems.length === 1 ? "" : "s"} in ${dirs.join(", ")}.`);
  process.exit(1);
}
console.log(`check-api-types: ok (${schemas.size} schemas; no API types declared in ${dirs.join(", ")}).`);
