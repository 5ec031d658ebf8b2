'use strict';
// Two players into a 1v1 match over gRPC, as a game client and a dedicated game server would do
// it: a game server opens ServeMatches, two players enter the queue and watch their tickets,
// the server takes the match, and then reports its result.
//
//   npm start -- HOST:PORT [--timeout-s 20]        (MATCHMAKER_TOKEN=<JWT> when auth is on)
//
// Prints one `MATCHED` line per player, with the match id and the game server's address.
// Exits 0 on success, 1 with a message on any failure or when the timeout passes.

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { PROTO_ROOT, PROTO_FILE, protoPath, parseCommandLine, runId, fail } = require('./common');

const USAGE = 'usage: npm start -- HOST:PORT [--timeout-s SECONDS]   (env MATCHMAKER_TOKEN=<JWT> when auth is on)';
const QUEUE = '1v1';
const UNARY_DEADLINE_MS = 5000;

const { address, timeoutMs, token } = parseCommandLine(USAGE);
protoPath();

// keepCase keeps the proto's field names (ticket_id, server_address); enums arrive as their
// names (SEARCHING, MATCHED); 64-bit integers as strings.
const definition = protoLoader.loadSync(PROTO_FILE, {
  includeDirs: [PROTO_ROOT],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const v1 = grpc.loadPackageDefinition(definition).matchmaker.v1;

// One HTTP/2 connection for both services. Keepalive PINGs let a long WatchTicket or
// ServeMatches stream notice a dead connection (the server also pings idle connections).
const channelOptions = {
  'grpc.keepalive_time_ms': 30000,
  'grpc.keepalive_timeout_ms': 10000,
  'grpc.keepalive_permit_without_calls': 1,
};
const credentials = grpc.credentials.createInsecure(); // grpc.credentials.createSsl() with TLS on
const clientService = new v1.ClientService(address, credentials, channelOptions);
const gameServerService = new v1.GameServerService(address, credentials, {
  ...channelOptions,
  channelOverride: clientService.getChannel(),
});

const run = runId();
const players = [`node-${run}-alice`, `node-${run}-bob`];
const gameServerAddress = `node-${run}-gs.example:7777`;
const deadline = Date.now() + timeoutMs;
const lastSeen = new Map(); // player -> a short description of its ticket's latest state
let closing = false;

// Per-call metadata: the bearer token when auth is on.
function metadata() {
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  return md;
}

function describe(err) {
  const code = Object.keys(grpc.status).find((k) => grpc.status[k] === err.code) || err.code;
  return `${code}: ${err.details || err.message}`;
}

// A unary call with its own deadline: past it the call fails with DEADLINE_EXCEEDED.
function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata(), { deadline: Date.now() + UNARY_DEADLINE_MS }, (err, response) =>
      err ? reject(new Error(`${method}: ${describe(err)}`)) : resolve(response),
    );
  });
}

function waitForReady() {
  return new Promise((resolve, reject) => {
    clientService.waitForReady(Math.min(deadline, Date.now() + 10000), (err) =>
      err ? reject(new Error(`cannot connect to ${address}: ${err.message}`)) : resolve(),
    );
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function isFinal(update) {
  if (update.state === 'CANCELLED' || update.state === 'EXPIRED') return true;
  return update.state === 'MATCHED' && Boolean(update.assignment && update.assignment.server_address);
}

// One WatchTicket stream. Resolves with the final update, or with `retry` when the stream ended
// early in a way a client recovers from by watching again (the stream sends the current state
// first, so nothing is missed); rejects on anything else.
function watchOnce(player, ticketId) {
  return new Promise((resolve, reject) => {
    const call = clientService.WatchTicket({ ticket_id: ticketId }, metadata(), { deadline });
    let final = null;
    call.on('data', (update) => {
      if (update.state === 'SEARCHING') {
        lastSeen.set(player, `SEARCHING for ${update.wait_seconds.toFixed(1)} s`);
      } else if (update.state === 'MATCHED' && !isFinal(update)) {
        lastSeen.set(player, `in match ${update.assignment.match_id}, waiting for a game server`);
      }
      if (isFinal(update)) final = update;
    });
    call.on('error', (err) => {
      if (err.code === grpc.status.UNAVAILABLE) resolve({ retry: describe(err) });
      else reject(new Error(`WatchTicket(${ticketId}) for ${player}: ${describe(err)}`));
    });
    call.on('status', (status) => {
      if (status.code !== grpc.status.OK) return; // reported by 'error'
      resolve(final ? { final } : { retry: 'stream ended before a final state' });
    });
  });
}

// Watches a ticket until it ends, watching again with backoff after a dropped stream.
async function watchUntilFinal(player, ticketId) {
  for (let attempt = 1; ; attempt++) {
    const outcome = await watchOnce(player, ticketId);
    if (outcome.final) return outcome.final;
    const backoff = Math.min(100 * 2 ** attempt, 2000);
    if (Date.now() + backoff >= deadline) throw new Error(`WatchTicket(${ticketId}): ${outcome.retry}`);
    console.error(`${player}: ${outcome.retry}; watching ${ticketId} again in ${backoff} ms`);
    await sleep(backoff);
  }
}

// The game server: registers and collects the matches assigned to it.
function serveMatches() {
  const assigned = new Map(); // match id -> MatchAssignment
  const waiters = [];
  const call = gameServerService.ServeMatches(
    { server_address: gameServerAddress, region: '', capacity: 0 },
    metadata(),
    { deadline },
  );
  call.on('data', (assignment) => {
    console.log(`game server ${gameServerAddress} got match ${assignment.match_id} (queue ${assignment.queue})`);
    assigned.set(assignment.match_id, assignment);
    waiters.splice(0).forEach((wake) => wake());
  });
  let failure = null;
  call.on('error', (err) => {
    if (closing && err.code === grpc.status.CANCELLED) return;
    failure = new Error(`ServeMatches: ${describe(err)}`);
    waiters.splice(0).forEach((wake) => wake());
  });
  return {
    async match(matchId) {
      while (!assigned.has(matchId)) {
        if (failure) throw failure;
        await new Promise((wake) => waiters.push(wake));
      }
      return assigned.get(matchId);
    },
    close: () => call.cancel(),
  };
}

function teams(assignment) {
  return assignment.teams.map((t) => `[${t.player_ids.join(', ')}]`).join(' vs ');
}

async function main() {
  await waitForReady();
  const gameServer = serveMatches();

  const tickets = [];
  for (const player of players) {
    const { ticket_id: ticketId } = await unary(clientService, 'EnterQueue', { queue: QUEUE, player_ids: [player] });
    console.log(`${player} entered ${QUEUE}: ticket ${ticketId}`);
    lastSeen.set(player, 'entered');
    tickets.push({ player, ticketId });
  }

  const finals = await Promise.all(tickets.map(({ player, ticketId }) => watchUntilFinal(player, ticketId)));
  finals.forEach((update, i) => {
    const { player, ticketId } = tickets[i];
    if (update.state !== 'MATCHED') {
      throw new Error(`${player}'s ticket ${ticketId} ended ${update.state}: ${update.reason || 'no reason given'}`);
    }
    const a = update.assignment;
    const win = a.win_probability.map((p) => p.toFixed(2)).join('/');
    console.log(
      `MATCHED player ${player} ticket ${ticketId} match ${a.match_id} server ${a.server_address} ` +
        `teams ${teams(a)} win ${win}`,
    );
  });

  const matchId = finals[0].assignment.match_id;
  if (finals[1].assignment.match_id !== matchId) {
    throw new Error(`the two players are in different matches (${matchId}, ${finals[1].assignment.match_id})`);
  }
  if (finals[0].assignment.server_address !== gameServerAddress) {
    // Another game server connected to the same matchmaker took the match: it reports the result.
    console.log(`match ${matchId} went to ${finals[0].assignment.server_address}; not reporting its result`);
    return;
  }

  // The game is played; the server that hosts it reports the result (first team won).
  const assignment = await gameServer.match(matchId);
  const ack = await unary(gameServerService, 'ReportMatchResult', {
    match_id: matchId,
    placements: assignment.teams.map((_, i) => i + 1),
  });
  for (const c of ack.changes) {
    console.log(
      `result ${matchId}: ${c.player_id} rating ${c.before.display.toFixed(1)} -> ${c.after.display.toFixed(1)}, ` +
        `rank points ${c.rank_points_before} -> ${c.rank_points_after}`,
    );
  }
  closing = true;
  gameServer.close();
}

function timedOut() {
  const states = [...lastSeen].map(([player, state]) => `${player}: ${state}`).join('; ');
  return `no match within ${timeoutMs / 1000} s (${states || 'not connected'})`;
}

// The streams carry the deadline themselves; this catches anything else that would hang.
const watchdog = setTimeout(() => fail(timedOut()), timeoutMs + 1000);

main().then(
  () => {
    clearTimeout(watchdog);
    clientService.close();
    gameServerService.close();
  },
  (err) => fail(Date.now() >= deadline && lastSeen.size ? `${timedOut()}: ${err.message}` : err.message),
);
