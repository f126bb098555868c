#!/usr/bin/env node
// Load every .proto under ../../protos with @grpc/proto-loader and print, as JSON, the services
// and their methods that grpc-js sees: {files: [...], services: {name: [methods]}}. Used by tests/test_protos.py (proto hygiene).
'use strict';
const path = require('node:path');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { PROTO_ROOT, LOADER_OPTIONS } = require('../src/protos');

function protoFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return protoFiles(full);
    return entry.name.endsWith('.proto') ? [path.relative(PROTO_ROOT, full)] : [];
  });
}

const result = { files: [], services: {} };
for (const file of protoFiles(path.join(PROTO_ROOT, 'mnemosyne')).sort()) {
  const definition = protoLoader.loadSync(file, LOADER_OPTIONS);
  const loaded = grpc.loadPackageDefinition(definition);
  for (const [name, value] of Object.entries(definition)) {
    if (value && typeof value === 'object' && !('format' in value) && name.startsWith('mnemosyne.')) {
      // A service definition: an object of method definitions with requestStream etc.
      const methods = Object.values(value).filter((m) => m && typeof m.path === 'string');
      if (methods.length) result.services[name] = methods.map((m) => m.path.split('/').pop()).sort();
    }
  }
  if (!loaded.mnemosyne) throw new Error(`${file}: package mnemosyne missing after load`);
  result.files.push(file);
}
process.stdout.write(JSON.stringify(result));
