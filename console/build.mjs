// The console's build: TypeScript's compiler (tsc, from node_modules) writes src/*.ts as
// JavaScript modules into the output folder, and the static files are copied beside them. Both
// are deterministic (no time, no path, no hash in the output), so tests/test_console.py rebuilds
// into a scratch folder and compares byte for byte with the committed service/console_assets/.
// Usage: node build.mjs OUT_DIR
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "..", "service", "console_assets"));
mkdirSync(out, { recursive: true });
execFileSync(process.execPath, [join(here, "node_modules", "typescript", "bin", "tsc"), "-p", here, "--outDir", out], {
  stdio: "inherit",
});
for (const name of readdirSync(join(here, "static")).sort()) {
  copyFileSync(join(here, "static", name), join(out, name));
}
