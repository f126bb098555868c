'use strict';
// The real Python server in a child process, for the Node tests. The interpreter is
// $MNEMOSYNE_PYTHON (tests/test_node_host.py passes its own), else python3 on PATH. And the
// trailing metadata of a refusal, for the tiny grpc-js servers some tests answer with.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const grpc = require('@grpc/grpc-js');
const { STATUS_DETAILS_KEY, ERROR_INFO_TYPE, RETRY_INFO_TYPE } = require('../src/errors');
const { loadStatusTypes } = require('../src/protos');

const PYTHON = process.env.MNEMOSYNE_PYTHON || 'python3';

/**
 * Start `python -m mnemosyne.cli serve --port 0`; resolves {target, port, stop(), kill()} after its
 * "serving" line, and `exited`, a promise of its end. `dataDir` and `port` start it on a data
 * directory kept after it (the caller's to remove) and on that port: its restart after `kill()`
 * (SIGKILL, no cleanup) or a crash.
 */
function startServer({ env = {}, args = [], dataDir: kept = null, port: asked = 0 } = {}) {
  const dataDir = kept ?? fs.mkdtempSync(path.join(os.tmpdir(), 'mnemosyne-node-'));
  const child = spawn(PYTHON, ['-m', 'mnemosyne.cli', 'serve', '--data-dir', dataDir, '--port', String(asked), '--metrics-port', '0', '--http-port', '0', ...args], {
    // The word-hashing embedder, as the Python tests use (a test's expected hits are written for
    // it), unless the environment or the test names another.
    env: { MNEMOSYNE_EMBEDDER: 'hashing', ...process.env, PYTHONUNBUFFERED: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((done) => child.once('exit', done));
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr = (stderr + chunk).slice(-4000); });
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`server did not start in 60s: ${stderr}`)); }, 60000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (kept === null) fs.rmSync(dataDir, { recursive: true, force: true }); // whether it served or not
      reject(new Error(`server exited with ${code}: ${stderr}`));
    });
    lines.once('line', (line) => {
      clearTimeout(timer);
      const { port } = JSON.parse(line);
      resolve({
        port,
        target: `127.0.0.1:${port}`,
        dataDir,
        exited, // resolves when the process has ended (a seam of its own may end it)
        async kill() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
          await exited;
        },
        async stop() {
          if (child.exitCode !== null) return;
          const exited = new Promise((done) => child.once('exit', done));
          child.kill('SIGTERM');
          const killer = setTimeout(() => child.kill('SIGKILL'), 20000);
          await exited;
          clearTimeout(killer);
        },
      });
    });
  });
}

/**
 * Trailing metadata carrying a google.rpc.Status of an ErrorInfo (`reason`, `metadata`; none for a
 * null `reason`) and, if `retryDelayMs` is given, a RetryInfo: what the server sends with a
 * refusal. `garbled`: the type URLs of details, first, whose bytes no such message has (a broken server's).
 */
function statusMetadata(code, message, reason, { metadata = {}, retryDelayMs = null, garbled = [] } = {}) {
  const { Status, ErrorInfo, RetryInfo } = loadStatusTypes();
  const details = garbled.map((typeUrl) => ({ type_url: typeUrl, value: Buffer.from([0xff, 0xff, 0xff]) }));
  if (reason !== null) {
    details.push({
      type_url: ERROR_INFO_TYPE,
      value: ErrorInfo.encode(ErrorInfo.fromObject({ reason, domain: 'mnemosyne.v1', metadata })).finish(),
    });
  }
  if (retryDelayMs != null) {
    const seconds = Math.floor(retryDelayMs / 1000);
    details.push({
      type_url: RETRY_INFO_TYPE,
      value: RetryInfo.encode(RetryInfo.fromObject({ retry_delay: { seconds, nanos: (retryDelayMs - seconds * 1000) * 1e6 } })).finish(),
    });
  }
  const trailing = new grpc.Metadata();
  trailing.set(STATUS_DETAILS_KEY, Buffer.from(Status.encode(Status.fromObject({ code, message, details })).finish()));
  return trailing;
}

let counter = 0;
/** A tenant id no other test uses. */
function uniqueTenant() {
  counter += 1;
  return `node${counter}-${process.pid}-${Math.random().toString(16).slice(2, 10)}`;
}

module.exports = { PYTHON, startServer, uniqueTenant, statusMetadata };
