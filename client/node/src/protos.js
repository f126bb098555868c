'use strict';
// Loading the service definitions from the .proto files themselves (no hand-written message
// definitions): the package's own protos/ when installed from a packed tarball (`npm pack` copies
// them in, scripts/bundle-protos.js), else the repository's protos/ when running from
// client/node; and the google.rpc error-detail messages from the google-proto-files package,
// decoded with protobufjs.
const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const BUNDLED_PROTO_ROOT = path.resolve(__dirname, '..', 'protos');
const REPOSITORY_PROTO_ROOT = path.resolve(__dirname, '..', '..', '..', 'protos');
const PROTO_ROOT = fs.existsSync(path.join(BUNDLED_PROTO_ROOT, 'mnemosyne', 'v1'))
  ? BUNDLED_PROTO_ROOT : REPOSITORY_PROTO_ROOT;
const GOOGLE_PROTO_ROOT = path.dirname(require.resolve('google-proto-files/package.json'));

// int64 as strings (exact; JavaScript numbers lose precision above 2^53), enums as names, and
// default values filled in so a missing field reads as proto3 would.
const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  // google/api/annotations.proto and http.proto (the HTTP mapping's options) from google-proto-files.
  includeDirs: [PROTO_ROOT, GOOGLE_PROTO_ROOT],
};

// The files of the services, under PROTO_ROOT.
const SERVICE_FILES = ['mnemosyne/v1/memory.proto', 'mnemosyne/v1/workspace.proto', 'mnemosyne/v1/admin.proto',
  'mnemosyne/v1/events.proto', 'mnemosyne/v1/hot_path.proto', 'mnemosyne/v1/webhooks.proto'];

let services;
/** The grpc-js service constructors of every service: Memory, Workspace, Admin, Events, HotPath, Webhook. */
function loadServices() {
  if (!services) {
    const definition = protoLoader.loadSync(SERVICE_FILES, LOADER_OPTIONS);
    const v1 = grpc.loadPackageDefinition(definition).mnemosyne.v1;
    services = {
      MemoryService: v1.MemoryService,
      WorkspaceService: v1.WorkspaceService,
      AdminService: v1.AdminService,
      EventsService: v1.EventsService,
      HotPathService: v1.HotPathService,
      WebhookService: v1.WebhookService,
    };
  }
  return services;
}

let serviceRoot;
/** The services' protos as one resolved protobufjs Root (their message types, field by field). */
function loadServiceRoot() {
  if (!serviceRoot) {
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) => {
      if (path.isAbsolute(target)) return target;
      if (target.startsWith('google/protobuf/')) return target; // protobufjs built-ins
      const own = path.join(PROTO_ROOT, target);
      return fs.existsSync(own) ? own : path.join(GOOGLE_PROTO_ROOT, target);
    };
    root.loadSync(SERVICE_FILES, { keepCase: true });
    serviceRoot = root.resolveAll();
  }
  return serviceRoot;
}

let statusTypes;
/** google.rpc.Status, ErrorInfo and RetryInfo as protobufjs types. */
function loadStatusTypes() {
  if (!statusTypes) {
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) => {
      // Imports resolve against google-proto-files; google/protobuf/*.proto are protobufjs built-ins.
      if (target.startsWith('google/protobuf/')) return target;
      return path.isAbsolute(target) ? target : path.join(GOOGLE_PROTO_ROOT, target);
    };
    root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
    statusTypes = {
      Status: root.lookupType('google.rpc.Status'),
      ErrorInfo: root.lookupType('google.rpc.ErrorInfo'),
      RetryInfo: root.lookupType('google.rpc.RetryInfo'),
    };
  }
  return statusTypes;
}

module.exports = {
  PROTO_ROOT, BUNDLED_PROTO_ROOT, REPOSITORY_PROTO_ROOT, GOOGLE_PROTO_ROOT, LOADER_OPTIONS, SERVICE_FILES, loadServices, loadServiceRoot, loadStatusTypes,
};
