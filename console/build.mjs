// The console's build: TypeScript's compiler (tsc, from node_modules) checks src/*.ts, then
// esbuild (pinned in package.json) bundles src/console.ts with its npm libraries (jsdiff, uPlot)
// into one JavaScript module and src/console.css with uPlot's style into one stylesheet; the
// static files and the bundled font (Inter, from @fontsource, with its licence) are copied
// beside them. Every step is deterministic (no time, no path, no hash in the output), so
// tests/test_console.py rebuilds into a scratch folder and compares byte for byte with the
// committed service/console_assets/.
// Usage: node build.mjs OUT_DIR
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "..", "service", "console_assets"));
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
execFileSync(process.execPath, [join(here, "node_modules", "typescript", "bin", "tsc"), "-p", here], { stdio: "inherit" });
await build({
  absWorkingDir: here,
  entryPoints: ["src/console.ts", "src/console.css"],
  outdir: out,
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: false,
  legalComments: "inline",
  charset: "utf8",
  external: ["*.woff2"], // the font files are copied beside the stylesheet, below
  logLevel: "warning",
});
for (const name of readdirSync(join(here, "static")).sort()) {
  copyFileSync(join(here, "static", name), join(out, name));
}
const font = join(here, "node_modules", "@fontsource", "inter");
for (const weight of ["400", "600"]) {
  copyFileSync(join(font, "files", `inter-latin-${weight}-normal.woff2`), join(out, `inter-${weight}.woff2`));
}
copyFileSync(join(font, "LICENSE"), join(out, "inter-LICENSE.txt"));
