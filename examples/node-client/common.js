'use strict';
// What both clients share: where the contract is, the command line, and how to fail.

const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');

// The repository's own contract, so the example always matches the server it ships with.
const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');
const PROTO_FILE = 'matchmaker/v1/matchmaker.proto';

function protoPath() {
  const file = path.join(PROTO_ROOT, PROTO_FILE);
  if (!fs.existsSync(file)) {
    fail(`${file} not found: run the example from a clone of the matchmaker repository`);
  }
  return file;
}

// HOST:PORT plus --timeout-s (the whole run's bound) and any extra options of the script.
function parseCommandLine(usage, extraOptions = {}) {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: { 'timeout-s': { type: 'string', default: '20' }, help: { type: 'boolean' }, ...extraOptions },
    });
  } catch (e) {
    fail(`${e.message}\n${usage}`);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  if (positionals.length > 1) fail(`expected one HOST:PORT, got ${positionals.join(' ')}\n${usage}`);
  const address = positionals[0] || '127.0.0.1:50051';
  if (!/^[^\s/]+:\d+$/.test(address)) fail(`address: expected HOST:PORT, got ${JSON.stringify(address)}\n${usage}`);
  const timeoutS = Number(values['timeout-s']);
  if (!Number.isFinite(timeoutS) || timeoutS <= 0) {
    fail(`--timeout-s: expected a positive number of seconds, got ${JSON.stringify(values['timeout-s'])}`);
  }
  // With auth on, every call carries `authorization: Bearer <JWT>`. One admin token may act for
  // every player and as any game server, which is what a single demo process needs.
  const token = process.env.MATCHMAKER_TOKEN || '';
  return { address, timeoutMs: timeoutS * 1000, token, values };
}

// A short random suffix, so that runs against a long-lived server use fresh players.
function runId() {
  return require('node:crypto').randomBytes(3).toString('hex');
}

function fail(message) {
  console.error(`error: ${message}`);
  process.exit(1);
}

module.exports = { PROTO_ROOT, PROTO_FILE, protoPath, parseCommandLine, runId, fail };
