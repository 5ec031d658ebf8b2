'use strict';
// One player over grpc-web, the protocol browser and WebGL builds speak (the server needs
// server.grpc_web = true). Written out by hand on fetch and protobufjs, so that it shows the
// whole wire format an engine's HTTP client has to produce:
//
//   request   POST /matchmaker.v1.ClientService/EnterQueue over HTTP/1.1
//             content-type: application/grpc-web+proto  (or application/grpc-web-text+proto:
//             the same bytes in base64, which some browser and WebGL HTTP stacks need)
//             body: one frame = flag 0x00, 4-byte big-endian length, the protobuf message
//   response  data frames (flag 0x00) with the messages, then a trailer frame (flag 0x80)
//             whose payload is `grpc-status:0\r\ngrpc-message:...\r\n`; a call refused before
//             any message may carry grpc-status in the HTTP headers instead.
//
//   npm run grpc-web -- HOST:PORT [--text] [--origin URL] [--timeout-s 20]
//
// It sends the CORS preflight a browser would (with --origin), enters a player, watches the
// ticket on a server-streaming call, cancels it, and shows how a refusal looks. Exits 0 when
// every call behaved as the protocol says, 1 otherwise.

const protobuf = require('protobufjs');
const { protoPath, parseCommandLine, runId, fail } = require('./common');

const USAGE =
  'usage: npm run grpc-web -- HOST:PORT [--text] [--origin URL] [--timeout-s SECONDS]   (env MATCHMAKER_TOKEN=<JWT> when auth is on)';
const { address, timeoutMs, token, values } = parseCommandLine(USAGE, {
  text: { type: 'boolean', default: false },
  origin: { type: 'string', default: '' },
});
const text = values.text;
const origin = values.origin;
const deadline = Date.now() + timeoutMs;
const contentType = text ? 'application/grpc-web-text+proto' : 'application/grpc-web+proto';
const mode = text ? 'grpc-web-text' : 'grpc-web';

// keepCase: the proto's field names (ticket_id), as in the gRPC example.
const root = new protobuf.Root().loadSync(protoPath(), { keepCase: true });
const type = (name) => root.lookupType(`matchmaker.v1.${name}`);

// A message as one length-prefixed frame.
function frame(messageType, fields) {
  const bytes = messageType.encode(messageType.fromObject(fields)).finish();
  const out = Buffer.alloc(5 + bytes.length);
  out[0] = 0x00;
  out.writeUInt32BE(bytes.length, 1);
  Buffer.from(bytes).copy(out, 5);
  return text ? Buffer.from(out.toString('base64')) : out;
}

// Turns response body chunks into frames. In text mode the body is base64, possibly several
// padded segments one after another, so it is decoded up to each padding character.
class FrameReader {
  constructor() {
    this.pending = Buffer.alloc(0);
    this.base64 = '';
  }

  push(chunk) {
    let bytes = Buffer.from(chunk);
    if (text) {
      this.base64 += bytes.toString('latin1').replace(/\s+/g, '');
      const decoded = [];
      for (;;) {
        // Segments are whole 4-character groups; one that ends with padding ends a segment.
        const pad = this.base64.indexOf('=');
        const end = pad >= 0 ? pad - (pad % 4) + 4 : this.base64.length - (this.base64.length % 4);
        if (end === 0 || end > this.base64.length) break;
        decoded.push(Buffer.from(this.base64.slice(0, end), 'base64'));
        this.base64 = this.base64.slice(end);
        if (pad < 0) break;
      }
      bytes = Buffer.concat(decoded);
    }
    this.pending = Buffer.concat([this.pending, bytes]);
    const frames = [];
    while (this.pending.length >= 5) {
      const length = this.pending.readUInt32BE(1);
      if (this.pending.length < 5 + length) break;
      frames.push({ flag: this.pending[0], payload: this.pending.subarray(5, 5 + length) });
      this.pending = this.pending.subarray(5 + length);
    }
    return frames;
  }

  leftover() {
    return this.pending.length + this.base64.length;
  }
}

// `key:value\r\n` lines of a trailer frame (or headers), keys lower-cased.
function parseTrailers(payload) {
  const out = {};
  for (const line of payload.toString('utf8').split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) out[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return out;
}

function requestHeaders() {
  const headers = {
    'content-type': contentType,
    accept: contentType,
    'x-grpc-web': '1',
    // The call's deadline: the server answers DEADLINE_EXCEEDED past it.
    'grpc-timeout': `${Math.max(1, deadline - Date.now())}m`,
  };
  if (origin) headers.origin = origin;
  if (token) headers.authorization = `Bearer ${token}`;
  return headers;
}

// One call. `onMessage` sees each response message as it arrives (server streaming); resolves
// with { status, message, messages, httpStatus, headers }.
async function call(method, requestType, responseType, fields, onMessage = () => {}) {
  const url = `http://${address}/matchmaker.v1.ClientService/${method}`;
  let response;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: requestHeaders(),
      body: frame(requestType, fields),
      signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())),
    });
  } catch (e) {
    throw new Error(`${method}: ${e.cause ? e.cause.message || e.cause.code : e.message} (${url}; is the server up, with server.grpc_web = true?)`);
  }
  if (response.status !== 200) {
    throw new Error(`${method}: HTTP ${response.status} ${await response.text()}`);
  }
  const answered = response.headers.get('content-type') || '';
  if (!answered.startsWith('application/grpc-web')) {
    throw new Error(`${method}: answered with content-type ${JSON.stringify(answered)}, not grpc-web`);
  }
  if (origin) {
    const allowed = response.headers.get('access-control-allow-origin');
    if (allowed !== origin && allowed !== '*') {
      throw new Error(`${method}: a browser at ${origin} could not read this answer (access-control-allow-origin: ${allowed})`);
    }
  }
  const reader = new FrameReader();
  const messages = [];
  let trailers = null;
  for await (const chunk of response.body) {
    for (const { flag, payload } of reader.push(chunk)) {
      if (flag & 0x80) {
        trailers = parseTrailers(payload);
      } else if (trailers) {
        throw new Error(`${method}: a data frame after the trailer frame`);
      } else {
        const message = responseType.toObject(responseType.decode(payload), { enums: String, longs: String, defaults: true });
        messages.push(message);
        onMessage(message);
      }
    }
  }
  if (reader.leftover() !== 0) throw new Error(`${method}: the body ended inside a frame`);
  // A call refused before any message may answer "trailers-only": the status in the headers.
  const status = trailers ? trailers['grpc-status'] : response.headers.get('grpc-status');
  const message = trailers ? trailers['grpc-message'] : response.headers.get('grpc-message');
  if (status === undefined || status === null) throw new Error(`${method}: no grpc-status in the trailer frame or the headers`);
  return {
    status: Number(status),
    message: decodeURIComponent(message || ''),
    messages,
    from: trailers ? 'trailer frame' : 'headers',
    contentType: answered,
  };
}

// The request headers a browser sends that need the server's CORS permission.
function preflightHeaders() {
  return ['content-type', 'x-grpc-web', 'grpc-timeout', ...(token ? ['authorization'] : [])];
}

// The CORS preflight, judged as a browser judges it: the origin must be allowed, and so must
// every header the call will send. In the Fetch standard `*` allows any header except
// `authorization`, which must be listed by name.
async function preflight() {
  const url = `http://${address}/matchmaker.v1.ClientService/EnterQueue`;
  const wanted = preflightHeaders();
  const response = await fetch(url, {
    method: 'OPTIONS',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': wanted.join(','),
    },
    signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())),
  });
  const allowedOrigin = response.headers.get('access-control-allow-origin');
  if (allowedOrigin !== origin && allowedOrigin !== '*') {
    throw new Error(
      `CORS preflight from ${origin}: origin not allowed (HTTP ${response.status}, access-control-allow-origin: ${allowedOrigin}); ` +
        `add the origin to server.grpc_web_origins`,
    );
  }
  const allowHeaders = (response.headers.get('access-control-allow-headers') || '')
    .split(',')
    .map((h) => h.trim().toLowerCase());
  const listed = (h) => allowHeaders.includes(h);
  const refused = wanted.filter((h) => !listed(h) && !listed('*'));
  if (refused.length) {
    throw new Error(
      `CORS preflight from ${origin}: a browser would not send ${refused.join(', ')} ` +
        `(access-control-allow-headers: ${allowHeaders.join(',') || 'none'})`,
    );
  }
  if (wanted.includes('authorization') && !listed('authorization')) {
    // `*` does not cover authorization in the Fetch standard: browsers that enforce it refuse.
    throw new Error(
      `CORS preflight from ${origin}: authorization is not named in access-control-allow-headers ` +
        `(${allowHeaders.join(',') || 'none'}); browsers would refuse calls with a token`,
    );
  }
  console.log(`${mode} preflight from ${origin}: allowed (access-control-allow-origin: ${allowedOrigin}, headers: ${wanted.join(',')})`);
}

function expectOk(method, result) {
  if (result.status !== 0) throw new Error(`${method}: grpc-status ${result.status} (${result.message})`);
}

async function main() {
  if (origin) await preflight();

  const player = `web-${runId()}`;
  const entered = await call('EnterQueue', type('EnterQueueRequest'), type('EnterQueueResponse'), {
    queue: '1v1',
    player_ids: [player],
  });
  expectOk('EnterQueue', entered);
  const ticketId = entered.messages[0] && entered.messages[0].ticket_id;
  if (!ticketId) throw new Error('EnterQueue: no ticket id in the answer');
  console.log(`${mode} EnterQueue: ticket ${ticketId} grpc-status ${entered.status} (from the ${entered.from}) player ${player}, answered as ${entered.contentType}`);

  // WatchTicket streams over the same HTTP/1.1 response: once the first update (SEARCHING)
  // arrived, cancel the ticket; the stream then sends CANCELLED and ends with its trailer frame.
  let cancelled = null;
  const watched = await call('WatchTicket', type('WatchTicketRequest'), type('TicketUpdate'), { ticket_id: ticketId }, (update) => {
    console.log(`${mode} WatchTicket: ${update.ticket_id} ${update.state}${update.reason ? ` (${update.reason})` : ''}`);
    if (update.state === 'SEARCHING' && !cancelled) {
      cancelled = call('CancelTicket', type('CancelTicketRequest'), type('CancelTicketResponse'), { ticket_id: ticketId });
    }
  });
  if (!cancelled) throw new Error('WatchTicket: the stream ended before its first update');
  const cancel = await cancelled;
  expectOk('CancelTicket', cancel);
  console.log(`${mode} CancelTicket: ${cancel.messages[0].state} grpc-status ${cancel.status}`);
  expectOk('WatchTicket', watched);
  const last = watched.messages[watched.messages.length - 1];
  if (!last || last.state !== 'CANCELLED') throw new Error(`WatchTicket: last update ${last && last.state}, expected CANCELLED`);
  console.log(`${mode} WatchTicket: stream ended after ${watched.messages.length} updates, grpc-status ${watched.status} (from the ${watched.from})`);

  // A refusal: the status and the message naming the field.
  const refused = await call('EnterQueue', type('EnterQueueRequest'), type('EnterQueueResponse'), { queue: '1v1', player_ids: [] });
  if (refused.status !== 3) throw new Error(`EnterQueue with no players: grpc-status ${refused.status}, expected 3 (INVALID_ARGUMENT)`);
  console.log(`${mode} EnterQueue with no players: grpc-status ${refused.status} (from the ${refused.from}): ${refused.message}`);
}

const watchdog = setTimeout(() => fail(`${mode}: no answer within ${timeoutMs / 1000} s`), timeoutMs + 1000);
main().then(
  () => clearTimeout(watchdog),
  (err) => fail(`${mode}: ${err.message}`),
);
