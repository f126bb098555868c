// The API reference page's build (served at /docs/ on the HTTP port): Swagger UI's files, as npm
// installed them (node_modules/swagger-ui-dist, pinned by package-lock.json), and the page's own
// (api-docs/) copied into the output folder unchanged, so tests/test_api_docs.py rebuilds into a
// scratch folder and compares byte for byte with the committed service/api_docs_assets/.
// Swagger UI's licence and notice travel with it (.txt: the server serves a flat folder of named
// types). Usage: node build-docs.mjs OUT_DIR
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "..", "service", "api_docs_assets"));
const swagger = join(here, "node_modules", "swagger-ui-dist");
const vendored = {
  "swagger-ui-bundle.js": "swagger-ui-bundle.js",
  "swagger-ui-bundle.js.LICENSE.txt": "swagger-ui-bundle.js.LICENSE.txt",
  "swagger-ui.css": "swagger-ui.css",
  LICENSE: "swagger-ui-LICENSE.txt",
  NOTICE: "swagger-ui-NOTICE.txt",
};
mkdirSync(out, { recursive: true });
for (const [name, as] of Object.entries(vendored)) {
  copyFileSync(join(swagger, name), join(out, as));
}
for (const name of readdirSync(join(here, "api-docs")).sort()) {
  copyFileSync(join(here, "api-docs", name), join(out, name));
}
