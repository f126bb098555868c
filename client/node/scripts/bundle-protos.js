#!/usr/bin/env node
// The package's own copy of the service definitions: `npm pack` runs this as `prepack` (copy
// ../../protos/mnemosyne/**/*.proto into ./protos, so the tarball works outside the repository)
// and with --remove as `postpack` (delete the copy again, so that in the repository the loader
// always reads protos/ itself and a stale copy cannot linger; the copy is also in .gitignore).
// It reports on stderr, so that `npm pack --json` prints only JSON on stdout.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const PACKAGE = path.resolve(__dirname, '..');
const SOURCE = path.resolve(PACKAGE, '..', '..', 'protos');
const BUNDLE = path.join(PACKAGE, 'protos');

function protoFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return protoFiles(full);
    return entry.name.endsWith('.proto') ? [path.relative(SOURCE, full)] : [];
  });
}

fs.rmSync(BUNDLE, { recursive: true, force: true });
if (process.argv.includes('--remove')) process.exit(0);
if (!fs.existsSync(path.join(SOURCE, 'mnemosyne'))) {
  process.stderr.write(`bundle-protos: ${SOURCE}/mnemosyne not found; pack the package from the repository's client/node\n`);
  process.exit(1);
}
const files = protoFiles(path.join(SOURCE, 'mnemosyne')).sort();
for (const file of files) {
  fs.mkdirSync(path.dirname(path.join(BUNDLE, file)), { recursive: true });
  fs.copyFileSync(path.join(SOURCE, file), path.join(BUNDLE, file));
}
process.stderr.write(`bundle-protos: copied ${files.length} files into ${path.relative(process.cwd(), BUNDLE) || '.'}: ${files.join(', ')}\n`);
