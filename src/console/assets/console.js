// The matchmaker operator console. Plain modern JavaScript, no library, no build step: it is
// compiled into the server binary. Every call goes to /console/api/ with the console header
// and, when the server has auth on, the admin token the operator pasted (kept in this tab's
// sessionStorage only). Docs: docs/console.md.
"use strict";

const REFRESH_MS = 2000;
const TOKEN_KEY = "matchmaker.console.token";
const $ = (sel, root = document) => root.querySelector(sel);

let session = null; // /console/api/session
let timer = null; // the current view's refresh
let generation = 0; // bumps on every navigation: late answers of an old view are dropped

// ---------------------------------------------------------------------------------------------
// Calls

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, options = {}) {
  const headers = { "x-matchmaker-console": "1" };
  if (token()) headers.authorization = "Bearer " + token();
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch("api/" + path, {
    method: options.body === undefined ? "GET" : "POST",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    cache: "no-store",
  });
  let data = null;
  try { data = await res.json(); } catch (_) { /* not JSON */ }
  if (!res.ok) {
    const message = (data && data.error) || res.status + " " + res.statusText;
    if (res.status === 401 || res.status === 403) signIn(message);
    throw new ApiError(res.status, message);
  }
  return data;
}

// ---------------------------------------------------------------------------------------------
// Small DOM helpers

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "color") el.style.color = v; // CSSOM: allowed under the page's CSP
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const fmt = {
  int: (v) => (v === undefined || v === null ? "–" : Math.round(v).toLocaleString("en-US")),
  num: (v, d = 2) => (v === undefined || v === null || !isFinite(v) ? "–" : Number(v).toFixed(d)),
  pct: (v) => (v === undefined || v === null ? "–" : (100 * v).toFixed(1) + "%"),
  secs: (v) => (v === undefined || v === null ? "–" : Number(v).toFixed(1) + " s"),
  time: (unix) => new Date(unix * 1000).toLocaleTimeString("en-GB"),
  ago: (unix) => {
    const s = Math.max(0, Date.now() / 1000 - unix);
    return s < 90 ? Math.round(s) + " s ago" : s < 5400 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
  },
};

// Unix seconds as an ISO time to the second. A ban may end past any date a Date can hold
// (BanPlayer takes any future time): that one shows as the number given.
function isoTime(unix) {
  const date = new Date(unix * 1000);
  return isNaN(date.getTime()) ? String(unix) : date.toISOString().replace(/\.\d+Z$/, "Z");
}

function playerLink(id) { return h("a", { href: "#/players/" + encodeURIComponent(id) }, id); }
function matchLink(id) { return h("a", { href: "#/matches/" + encodeURIComponent(id) }, id); }

function setStatus(text) { $("#status").textContent = text; }

function showError(view, err) {
  if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return;
  view.replaceChildren(h("p", { class: "error" }, String(err.message || err)));
}

// ---------------------------------------------------------------------------------------------
// Charts: an SVG line chart, redrawn in place. `series`: [{name, color, points: [[t, v], ...]}].

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function chart(title, opts = {}) {
  const svg = s("svg", { viewBox: "0 0 600 " + (opts.height || 120), role: "img" });
  const legend = h("span", { class: "title" }, h("b", {}, title));
  const el = h("div", { class: "chart" + (opts.tall ? " tall" : ""), dataset: { chart: opts.id || title } }, legend, svg);
  el.draw = (series, range) => drawChart(svg, legend, title, series, range, opts);
  return el;
}

function drawChart(svg, legend, title, series, range, opts) {
  // Drawn in the element's own pixels, so text is never stretched.
  const W = Math.max(200, Math.round(svg.getBoundingClientRect().width) || 600), H = opts.height || 120, L = 44, R = 8, T = 8, B = 18;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.replaceChildren();
  legend.replaceChildren(h("b", {}, title), ...series.map((x) => h("i", { color: x.color }, "● " + x.name)));
  const all = series.flatMap((x) => x.points);
  svg.dataset.points = String(all.length);
  if (all.length === 0) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no samples yet"));
    return;
  }
  const t0 = range ? range[0] : Math.min(...all.map((p) => p[0]));
  const t1 = range ? range[1] : Math.max(...all.map((p) => p[0]));
  let lo = opts.min !== undefined ? opts.min : Math.min(...all.map((p) => p[1]));
  let hi = opts.max !== undefined ? opts.max : Math.max(...all.map((p) => p[1]));
  if (opts.min === undefined && lo > 0 && opts.zero !== false) lo = 0;
  if (hi <= lo) hi = lo + 1;
  const x = (t) => L + ((t - t0) / Math.max(1e-9, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  for (const v of [lo, (lo + hi) / 2, hi]) {
    svg.append(s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    svg.append(s("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" }, fmtAxis(v)));
  }
  // Clock time at both ends: to the minute over a long range, to the second over a short one.
  const label = opts.timeLabel || ((t) => fmt.time(t).slice(0, t1 - t0 >= 600 ? 5 : 8));
  svg.append(s("text", { x: L, y: H - 4 }, label(t0)));
  svg.append(s("text", { x: W - R, y: H - 4, "text-anchor": "end" }, label(t1)));
  for (const ser of series) {
    if (ser.points.length === 0) continue;
    const d = ser.points.map((p, i) => (i ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
    svg.append(s("path", { d, fill: "none", stroke: ser.color, "stroke-width": 1.8, "vector-effect": "non-scaling-stroke" }));
    if (ser.points.length <= 40) {
      for (const p of ser.points) svg.append(s("circle", { cx: x(p[0]), cy: y(p[1]), r: 2.4, fill: ser.color }));
    }
  }
}

function fmtAxis(v) {
  const a = Math.abs(v);
  if (a >= 10000) return (v / 1000).toFixed(0) + "k";
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  return v.toFixed(2);
}

// ---------------------------------------------------------------------------------------------
// Queues: GetQueueStats every refresh, charts over the last hour from the server's samples.

const QUEUE_NUMBERS = [
  ["tickets_waiting", "Waiting tickets", fmt.int],
  ["players_waiting", "Waiting players", fmt.int],
  ["matches_formed", "Matches formed", fmt.int],
  ["wait_p50_seconds", "Wait p50", fmt.secs],
  ["wait_p95_seconds", "Wait p95", fmt.secs],
  ["quality_mean", "Match quality", (v) => fmt.num(v, 3)],
  ["skill_window", "Skill window ±", (v, st) => (st.starving ? "any (starving)" : fmt.num(v, 0))],
  ["longest_wait_seconds", "Longest wait", fmt.secs],
  ["accept_rate", "Ready-check accept", fmt.pct],
  ["backfill_fill_p50_seconds", "Backfill fill p50", fmt.secs],
  ["tickets_expired", "Tickets expired", fmt.int],
  ["last_tick_ms", "Last tick", (v) => fmt.num(v, 1) + " ms"],
];

const QUEUE_CHARTS = [
  ["waiting", "Waiting tickets", [["tickets_waiting", "waiting", "#2563eb"]]],
  ["rate", "Matches per minute", [["matches_per_minute", "matches/min", "#15803d"]]],
  ["wait", "Wait (seconds)", [["wait_p50_seconds", "p50", "#2563eb"], ["wait_p95_seconds", "p95", "#d97706"]]],
  ["quality", "Match quality", [["quality_mean", "mean", "#7c3aed"]], { min: 0, max: 0.5 }],
  ["window", "Skill window (±)", [["skill_window", "window", "#0891b2"]]],
  ["ready", "Ready-check accept rate", [["accept_rate", "accepted", "#15803d"]], { min: 0, max: 1 }],
];

async function viewQueues(view, gen) {
  view.replaceChildren(h("h1", {}, "Queues"), h("p", { class: "note" }, "Numbers from GetQueueStats every " + REFRESH_MS / 1000 + " s; charts over the last hour, one sample every " + session.sample_seconds + " s."));
  const cards = h("div", { class: "cards" });
  view.append(cards);
  const samples = new Map(); // queue -> samples
  const built = new Map(); // queue -> {numbers, charts}
  // Samples are asked for after the newest held, on the server's monotonic clock (`at`), and
  // placed on the wall clock as it reads now: a step of either clock moves no sample out of
  // order.
  let after = -1;
  const refresh = async () => {
    const data = await api("queues?after=" + after);
    if (gen !== generation) return;
    if (data.now_at < after) {
      // The server restarted: its clock, and its samples, began again.
      samples.clear();
      after = -1;
      return refresh();
    }
    for (const q of data.queues) {
      let card = built.get(q.queue);
      if (!card) {
        card = buildQueueCard(q);
        built.set(q.queue, card);
        cards.append(card.el);
      }
      const list = samples.get(q.queue) || [];
      list.push(...q.history);
      while (list.length && list[0].at < data.now_at - session.history_seconds) list.shift();
      samples.set(q.queue, list);
      const placed = list.map((x) => Object.assign({}, x, { t: data.now - (data.now_at - x.at) }));
      const oldest = data.now - session.history_seconds;
      updateQueueCard(card, q, placed, [Math.max(oldest, placed.length ? placed[0].t : data.now), data.now]);
      after = Math.max(after, ...q.history.map((x) => x.at));
    }
    cards.dataset.updated = String(data.now);
    setStatus("updated " + fmt.time(data.now));
  };
  await refresh();
  return refresh;
}

function buildQueueCard(q) {
  const st = q.settings || {};
  const numbers = h("div", { class: "numbers" });
  const cells = {};
  for (const [key, label] of QUEUE_NUMBERS) {
    const value = h("span", { class: "value", dataset: { queue: q.queue, stat: key } }, "–");
    cells[key] = value;
    numbers.append(h("div", {}, h("span", { class: "label" }, label), value));
  }
  const charts = {};
  const grid = h("div", { class: "charts" });
  for (const [id, title, , opts] of QUEUE_CHARTS) {
    charts[id] = chart(title, Object.assign({ id: q.queue + "." + id }, opts || {}));
    grid.append(charts[id]);
  }
  const shape = st.teams ? st.teams + "×" + st.team_size : "";
  const el = h("section", { class: "card", dataset: { queue: q.queue } },
    h("h2", {}, q.queue),
    h("div", { class: "sub" }, [shape, st.rating, st.ranking && st.ranking !== "none" ? "ranking " + st.ranking : null, st.pool ? "pool " + st.pool : null, st.ready_check_seconds ? "ready-check " + st.ready_check_seconds + " s" : null].filter(Boolean).join(" · ")),
    numbers, grid);
  return { el, cells, charts };
}

function updateQueueCard(card, q, list, range) {
  for (const [key, , format] of QUEUE_NUMBERS) {
    const v = q.stats[key];
    card.cells[key].textContent = format(v, q.stats);
    card.cells[key].dataset.value = String(v);
  }
  for (const [id, , lines] of QUEUE_CHARTS) {
    card.charts[id].draw(lines.map(([key, name, color]) => ({ name, color, points: list.map((x) => [x.t, x[key]]) })), range);
  }
}

// ---------------------------------------------------------------------------------------------
// Matches

// Teams in a list: the first two players of each team, then how many more.
function teamsCell(teams) {
  return teams.map((t, i) => h("div", { class: "team" }, h("b", {}, "T" + (i + 1) + " "),
    ...t.slice(0, 2).flatMap((p, j) => [j ? ", " : "", playerLink(p)]), t.length > 2 ? " +" + (t.length - 2) : ""));
}

function matchSearch(value = "") {
  const input = h("input", { id: "match-search", placeholder: "match id", value, required: true, size: 40 });
  return h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = "#/matches/" + encodeURIComponent(input.value.trim()); } }, input, h("button", { type: "submit" }, "Open"));
}

async function viewMatches(view, gen) {
  const liveBody = h("tbody");
  const recentBody = h("tbody");
  const liveTitle = h("h2", {}, "Live matches");
  const liveNote = h("p", { class: "note" }, "The newest of the matches held now (ready-check to completing).");
  const recentNote = h("p", { class: "note" });
  const recentSource = {
    server: ["Results this server applied since it started (newest first). Each match's page, and each player's matches, come from the durable match history (GetMatch, ListPlayerMatches).", "No results applied since this server started."],
    cluster: ["The cluster's latest results, newest first (ListRecentResults: the durable event log and match history).", "No results in the event log."],
  };
  view.replaceChildren(h("h1", {}, "Matches"), matchSearch(),
    h("div", { class: "stack" },
      h("section", { class: "card" }, liveTitle, liveNote,
        h("table", { id: "live-matches" }, h("thead", {}, h("tr", {}, h("th", {}, "Match"), h("th", {}, "Queue"), h("th", {}, "Phase"), h("th", {}, "Teams"), h("th", { class: "num" }, "Win prob."), h("th", {}, "Formed"))), liveBody)),
      h("section", { class: "card" }, h("h2", {}, "Recent results"), recentNote,
        h("table", { id: "recent-matches" }, h("thead", {}, h("tr", {}, h("th", {}, "Match"), h("th", {}, "Queue"), h("th", {}, "Teams"), h("th", {}, "Placements"), h("th", {}, "Applied"))), recentBody))));
  const refresh = async () => {
    const data = await api("matches?limit=15");
    if (gen !== generation) return;
    liveTitle.textContent = "Live matches (" + data.live.total + ")";
    liveBody.replaceChildren(...(data.live.matches.length ? data.live.matches.slice(0, 8).map((m) => h("tr", { dataset: { match: m.match_id } },
      h("td", {}, matchLink(m.match_id)), h("td", {}, m.queue), h("td", {}, h("span", { class: "pill phase-" + m.phase }, m.phase)),
      h("td", {}, teamsCell(m.teams)), h("td", { class: "num" }, (m.win_probability || []).map((p) => fmt.pct(p)).join(" / ")),
      h("td", {}, fmt.ago(m.formed_unix)))) : [h("tr", {}, h("td", { colspan: 6, class: "note" }, "No live matches."))]));
    const [note, none] = recentSource[data.recent_from] || recentSource.server;
    recentNote.textContent = note;
    recentBody.replaceChildren(...(data.recent.length ? data.recent.map((r) => h("tr", {},
      h("td", {}, matchLink(r.match_id)), h("td", {}, r.queue), h("td", {}, teamsCell(r.teams)),
      h("td", {}, r.placements.join(" / ")), h("td", {}, fmt.ago(r.applied_unix)))) : [h("tr", {}, h("td", { colspan: 5, class: "note" }, none))]));
    setStatus("updated " + fmt.time(Date.now() / 1000));
  };
  await refresh();
  return refresh;
}

// One match from GetMatch: live (teams, predictions) or ended (placements, rating changes).
async function viewMatch(view, gen, id) {
  const data = await api("matches/" + encodeURIComponent(id));
  if (gen !== generation) return;
  const m = data.match;
  const live = data.live;
  const formed = data.win_probability_at_formation;
  const now = data.prediction_now;
  const when = [m.formed_unix ? "formed " + fmt.ago(m.formed_unix) : null, m.started_unix ? "started " + fmt.ago(m.started_unix) : null, m.ended_unix ? "ended " + fmt.ago(m.ended_unix) : null];
  const head = h("p", { id: "match-summary", dataset: { phase: m.phase } }, h("span", { class: "pill phase-" + m.phase }, m.phase), " ",
    [m.queue, ...when, m.server_address ? "server " + m.server_address : "no game server", live && live.region ? "region " + live.region : null, live ? "quality " + fmt.num(live.quality, 3) : null].filter(Boolean).join(" · "));
  const change = new Map(m.changes.map((c) => [c.player_id, c]));
  let table;
  if (m.phase === "completed") {
    table = h("table", { id: "match-result" }, h("thead", {}, h("tr", {}, h("th", {}, "Team"), h("th", {}, "Place"), h("th", { class: "num" }, "Predicted at formation"), h("th", {}, "Player"), h("th", { class: "num" }, "Rating"), h("th", { class: "num" }, "Δ"), h("th", { class: "num" }, "Rank points"))),
      h("tbody", {}, m.teams.flatMap((t, i) => t.map((p) => {
        const c = change.get(p);
        const d = c ? c.rating_after - c.rating_before : 0;
        return h("tr", {}, h("td", {}, "T" + (i + 1)), h("td", {}, h("span", { class: "pill " + (m.placements[i] === 1 ? "win" : "loss") }, String(m.placements[i]))),
          h("td", { class: "num" }, formed ? fmt.pct(formed[i]) : "–"), h("td", {}, playerLink(p)),
          h("td", { class: "num" }, c ? fmt.num(c.rating_before, 1) + " → " + fmt.num(c.rating_after, 1) : "–"),
          h("td", { class: "num " + (d >= 0 ? "up" : "down") }, c ? (d >= 0 ? "+" : "") + fmt.num(d, 1) : ""),
          h("td", { class: "num" }, c ? c.rank_points_before + " → " + c.rank_points_after : "–"));
      }))));
  } else {
    table = h("table", { id: "match-teams" }, h("thead", {}, h("tr", {}, h("th", {}, "Team"), h("th", {}, "Players"), h("th", { class: "num" }, "Win prob. at formation"), h("th", { class: "num" }, "Win prob. now (PredictMatch)"))),
      h("tbody", {}, m.teams.map((t, i) => h("tr", {}, h("td", {}, "T" + (i + 1)), h("td", {}, ...t.flatMap((p, j) => [j ? ", " : "", playerLink(p)])),
        h("td", { class: "num" }, formed ? fmt.pct(formed[i]) : "–"), h("td", { class: "num" }, now ? fmt.pct(now.win_probability[i]) : "–")))));
  }
  const notes = [];
  if (m.phase === "completed") {
    if (!formed) notes.push("The prediction at formation is kept in memory only, for matches this server formed or rated since it started.");
    if (now) notes.push("With today's ratings (PredictMatch): " + now.win_probability.map((p, i) => "T" + (i + 1) + " " + fmt.pct(p)).join(", ") + ".");
  } else if (m.phase === "cancelled") {
    notes.push("Cancelled without a result: no rating changed.");
  } else {
    if (now) notes.push("Draw probability now: " + fmt.pct(now.draw_probability) + ".");
    notes.push("The result and rating changes appear here once the game server reports it.");
  }
  view.replaceChildren(h("p", {}, h("a", { href: "#/matches" }, "← Matches")), h("h1", {}, "Match " + m.match_id), head, table,
    h("p", { class: "note" }, notes.join(" ")));
  return null;
}

// ---------------------------------------------------------------------------------------------
// Players

function playerSearch(value = "") {
  const input = h("input", { id: "player-search", placeholder: "player id", value, required: true, size: 32 });
  return h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = "#/players/" + encodeURIComponent(input.value.trim()); } }, input, h("button", { type: "submit", class: "primary" }, "Find"));
}

async function viewPlayers(view) {
  view.replaceChildren(h("h1", {}, "Players"), playerSearch(), h("p", { class: "note" }, "Search by player id; players also link from matches and leaderboards."));
  $("#player-search").focus();
  return null;
}

async function viewPlayer(view, gen, id, queue) {
  const data = await api("players/" + encodeURIComponent(id));
  if (gen !== generation) return;
  const played = data.queues.filter((q) => q.view.games > 0 || q.points.length > 0);
  const pick = queue || (played[0] || data.queues[0]).view.queue;
  const q = data.queues.find((x) => x.view.queue === pick) || data.queues[0];
  const v = q.view;
  const tabs = h("div", { class: "actions" }, data.queues.map((x) => h("button", {
    type: "button", class: x.view.queue === pick ? "primary" : "", onclick: () => { location.hash = "#/players/" + encodeURIComponent(id) + "/" + encodeURIComponent(x.view.queue); },
  }, x.view.queue + (x.view.games ? " (" + x.view.games + ")" : ""))));
  const points = q.points.slice();
  // The chart ends at the player's rating now.
  if (v.rating) points.push({ t: Date.now() / 1000, rating: v.rating.display, rank_points: v.rank_points });
  const ratingChart = chart("Rating", { id: "player-rating", tall: true, height: 220, zero: false });
  const rpChart = chart("Rank points", { id: "player-rank-points", tall: true, height: 220 });
  const weekChart = chart("End-of-week rank points", { id: "player-weeks", zero: true, timeLabel: () => "" });
  const recent = data.recent.filter((r) => r.queue === pick).slice(0, 20);
  const ban = data.ban;
  // Weng-Lin shows the conservative μ − 3σ, which lies below the interval around μ.
  const conservative = v.rating && Math.abs(v.rating.display - v.rating.mean) > 1e-9;
  const banText = !ban ? "Not banned."
    : (ban.active ? "Banned " : "Was banned ") + (ban.until_unix ? "until " + isoTime(ban.until_unix) : "for good") + " (since " + isoTime(ban.since_unix) + "): " + ban.reason + (ban.active ? "" : " (ended)");
  view.replaceChildren(playerSearch(id), h("h1", {}, "Player " + id), tabs,
    h("div", { class: "numbers", id: "player-summary", dataset: { queue: pick } },
      ...[["Rating" + (conservative ? " (μ − 3σ)" : ""), v.rating ? fmt.num(v.rating.display, 1) : "–"],
        ...(conservative ? [["Skill μ", fmt.num(v.rating.mean, 1)]] : []),
        ["95% interval" + (conservative ? " of μ" : ""), v.rating ? fmt.num(v.rating.display_low, 0) + " – " + fmt.num(v.rating.display_high, 0) : "–"],
        ["Tier", v.tier || "–"], ["Rank points", fmt.int(v.rank_points)], ["Games", fmt.int(v.games)], ["Wins", fmt.int(v.wins)],
        ["Status", v.status], ["Season / week", v.season + " / " + v.week]].map(([l, x]) => h("div", {}, h("span", { class: "label" }, l), h("span", { class: "value" }, x)))),
    h("p", { id: "player-ban", class: ban && ban.active ? "error" : "note", dataset: { banned: ban ? String(ban.active) : "none" } }, banText),
    h("div", { class: "row" }, ratingChart, rpChart),
    h("p", { class: "note" }, points.length > 1 ? "Rating and rank points before their oldest kept match and after each completed one (the match history, ListPlayerMatches), up to now." : "No completed match in this player's history: the chart begins with their next result."),
    h("div", { class: "row" },
      h("section", { class: "card" }, h("h2", {}, "Recent matches"),
        h("table", { id: "player-matches" }, h("thead", {}, h("tr", {}, h("th", {}, "Match"), h("th", {}, "Place"), h("th", { class: "num" }, "Rating Δ"), h("th", { class: "num" }, "RP"), h("th", {}, "Ended"))),
          h("tbody", {}, recent.length ? recent.map((r) => {
            const c = r.changes.find((x) => x.player_id === id);
            const team = r.teams.findIndex((t) => t.includes(id));
            const place = r.phase === "completed" ? h("span", { class: "pill " + (r.placements[team] === 1 ? "win" : "loss") }, String(r.placements[team])) : h("span", { class: "pill phase-" + r.phase }, r.phase);
            const d = c ? c.rating_after - c.rating_before : 0;
            return h("tr", {}, h("td", {}, matchLink(r.match_id)), h("td", {}, place),
              h("td", { class: "num " + (d >= 0 ? "up" : "down") }, c ? (d >= 0 ? "+" : "") + fmt.num(d, 1) : "–"), h("td", { class: "num" }, c ? c.rank_points_before + " → " + c.rank_points_after : "–"), h("td", {}, r.ended_unix ? fmt.ago(r.ended_unix) : "–"));
          }) : h("tr", {}, h("td", { colspan: 5, class: "note" }, "No matches in this player's history."))))),
      h("section", { class: "card" }, h("h2", {}, "Seasons"), weekChart,
        h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Season"), h("th", {}, "Tier"), h("th", { class: "num" }, "RP"), h("th", { class: "num" }, "Place"))),
          h("tbody", {}, v.season_history.length ? v.season_history.map((s) => h("tr", {}, h("td", {}, s.season), h("td", {}, s.tier), h("td", { class: "num" }, s.rank_points), h("td", { class: "num" }, s.place || "–"))) : h("tr", {}, h("td", { colspan: 4, class: "note" }, "No season ended yet.")))))));
  ratingChart.draw([{ name: "rating", color: "#2563eb", points: points.map((p) => [p.t, p.rating]) }]);
  rpChart.draw([{ name: "rank points", color: "#d97706", points: points.map((p) => [p.t, p.rank_points]) }]);
  weekChart.draw([{ name: "RP", color: "#7c3aed", points: v.week_history.map((w, i) => [i, w.rank_points]) }]);
  return null;
}

// ---------------------------------------------------------------------------------------------
// Leaderboards

async function viewLeaderboards(view, gen, queue) {
  const queues = (await api("queues?after=Infinity")).queues;
  if (gen !== generation) return;
  const ranked = queues.filter((q) => q.settings && q.settings.ranking !== "none");
  const list = ranked.length ? ranked : queues;
  const pick = queue || (list[0] && list[0].queue);
  const select = h("select", { id: "leaderboard-queue", onchange: () => { location.hash = "#/leaderboards/" + encodeURIComponent(select.value); } },
    list.map((q) => h("option", { value: q.queue, selected: q.queue === pick }, q.queue + (q.settings ? " (pool " + q.settings.pool + ", " + q.settings.ranking + ")" : ""))));
  const body = h("tbody");
  const legend = h("div", { class: "actions" });
  const total = h("span", { class: "note" });
  view.replaceChildren(h("h1", {}, "Leaderboards"), h("form", { class: "inline" }, select, total), legend,
    h("table", { id: "leaderboard" }, h("thead", {}, h("tr", {}, h("th", { class: "num" }, "#"), h("th", {}, "Player"), h("th", {}, "Tier"), h("th", { class: "num" }, "Rank points"), h("th", { class: "num" }, "Rating"), h("th", { class: "num" }, "Games"), h("th", { class: "num" }, "Wins"))), body));
  if (!pick) return null;
  const refresh = async () => {
    const data = await api("leaderboard?limit=100&queue=" + encodeURIComponent(pick));
    if (gen !== generation) return;
    total.textContent = data.total + " ranked players in this queue's pool";
    const counts = new Map();
    for (const e of data.entries) counts.set(e.tier, (counts.get(e.tier) || 0) + 1);
    legend.replaceChildren(...data.tiers.map((t) => h("span", { class: "pill", title: "from " + t.min_rp + " RP" + (t.top_n ? ", top " + t.top_n : "") }, t.name + (counts.get(t.name) ? " · " + counts.get(t.name) : ""))));
    body.replaceChildren(...(data.entries.length ? data.entries.map((e, i) => h("tr", {}, h("td", { class: "num" }, i + 1), h("td", {}, playerLink(e.player_id)), h("td", {}, e.tier || "–"),
      h("td", { class: "num" }, e.rank_points), h("td", { class: "num" }, e.rating ? fmt.num(e.rating.display, 1) : "–"), h("td", { class: "num" }, e.games), h("td", { class: "num" }, e.wins)))
      : [h("tr", {}, h("td", { colspan: 7, class: "note" }, "Nobody is ranked in this queue yet."))]));
  };
  await refresh();
  return refresh;
}

// ---------------------------------------------------------------------------------------------
// Seasons: the clock per pool; a soft or hard reset previews (SeasonReset dry run: players per
// tier before and after) and asks for confirmation before it runs; end of season likewise.

async function viewSeasons(view, gen) {
  const data = await api("seasons");
  if (gen !== generation) return;
  const panel = h("div", { id: "season-panel" });
  view.replaceChildren(h("h1", {}, "Seasons"),
    h("table", { id: "seasons" }, h("thead", {}, h("tr", {}, h("th", {}, "Rating pool"), h("th", {}, "Queues"), h("th", {}, "Ranking"), h("th", { class: "num" }, "Season"), h("th", { class: "num" }, "Week"), h("th", {}, ""))),
      h("tbody", {}, data.pools.map((p) => h("tr", { dataset: { pool: p.pool } }, h("td", {}, p.pool), h("td", {}, p.queues.join(", ")), h("td", {}, p.ranking),
        h("td", { class: "num", dataset: { field: "season" } }, p.season ?? "–"), h("td", { class: "num", dataset: { field: "week" } }, p.week ?? "–"),
        h("td", {}, h("div", { class: "actions" },
          h("button", { type: "button", dataset: { action: "preview-soft", queue: p.queues[0] }, onclick: () => previewReset(panel, "soft", p) }, "Soft reset…"),
          h("button", { type: "button", dataset: { action: "preview-hard", queue: p.queues[0] }, onclick: () => previewReset(panel, "hard", p) }, "Hard reset…"),
          p.ranking === "ladder" ? h("button", { type: "button", dataset: { action: "end-season", queue: p.queues[0] }, onclick: () => confirmEnd(panel, p) }, "End season…") : null)))))),
    h("p", { class: "note" }, "Soft reset: rank points cut to tier caps, one rating period of uncertainty, next week. Hard reset: rank points from the season's tiers, ratings rescaled, next season. Each runs the SeasonReset RPC for one rating pool (the pool of the queue named), exactly as `matchmaker admin season-reset --queue Q`."),
    panel);
  return null;
}

async function previewReset(panel, kind, pool) {
  panel.replaceChildren(h("div", { class: "preview" }, "Computing the " + kind + " reset of " + pool.pool + "…"));
  let r;
  try {
    r = await api("seasons/reset", { body: { kind, queue: pool.queues[0], dry_run: true } });
  } catch (e) { panel.replaceChildren(h("p", { class: "error" }, e.message)); return; }
  const p = r.pools[0];
  const confirm = h("button", { type: "button", class: "danger", id: "confirm-reset", dataset: { kind } }, "Apply " + kind + " reset");
  const box = h("div", { class: "preview", id: "reset-preview", dataset: { kind, pool: pool.pool } },
    h("h2", {}, "Preview: " + kind + " reset of " + pool.pool),
    h("p", {}, "Season " + p.season_before + " week " + p.week_before + " → season " + p.season + " week " + p.week + ". " + r.players_changed + " of " + p.players + " players change."),
    r.tiers.length ? h("table", { id: "reset-tiers" }, h("thead", {}, h("tr", {}, h("th", {}, "Tier"), h("th", { class: "num" }, "Players before"), h("th", { class: "num" }, "Players after"))),
      h("tbody", {}, r.tiers.map((t) => h("tr", {}, h("td", {}, t.tier), h("td", { class: "num" }, t.before), h("td", { class: "num " + (t.after > t.before ? "up" : t.after < t.before ? "down" : "") }, t.after)))))
      : h("p", { class: "note" }, "This pool has no ladder tiers."),
    h("div", { class: "actions" }, confirm, h("button", { type: "button", onclick: () => panel.replaceChildren() }, "Cancel")));
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    try {
      const done = await api("seasons/reset", { body: { kind, queue: pool.queues[0], dry_run: false } });
      panel.replaceChildren(h("p", { id: "reset-done", class: "preview" }, kind + " reset applied: season " + done.season + " week " + done.week + ", " + done.players_changed + " players changed."));
      const row = document.querySelector('#seasons tr[data-pool="' + CSS.escape(pool.pool) + '"]');
      if (row) { row.querySelector('[data-field="season"]').textContent = done.season; row.querySelector('[data-field="week"]').textContent = done.week; }
      // The row's other actions (End season…) name the season it is in now.
      pool.season = done.season;
      pool.week = done.week;
    } catch (e) { panel.replaceChildren(h("p", { class: "error" }, e.message)); }
  });
  panel.replaceChildren(box);
}

function confirmEnd(panel, pool) {
  const confirm = h("button", { type: "button", class: "danger", id: "confirm-end" }, "End season " + pool.season);
  panel.replaceChildren(h("div", { class: "preview" }, h("h2", {}, "End season " + pool.season + " of " + pool.pool),
    h("p", {}, "Records every ladder player's season rank (Master and above by mean end-of-week rank points). Rank points do not change."),
    h("div", { class: "actions" }, confirm, h("button", { type: "button", onclick: () => panel.replaceChildren() }, "Cancel"))));
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    try {
      const done = await api("seasons/end", { body: { queue: pool.queues[0] } });
      panel.replaceChildren(h("p", { class: "preview" }, "Season " + done.season + " ended: " + done.players_ranked + " players ranked."));
    } catch (e) { panel.replaceChildren(h("p", { class: "error" }, e.message)); }
  });
}

// ---------------------------------------------------------------------------------------------
// Sign-in and routing

function signIn(message) {
  clearInterval(timer);
  generation++;
  $("#view").replaceChildren();
  $("#nav").hidden = true;
  $("#sign-out").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message && token() ? message : "";
  setStatus(session && session.auth ? "auth on: token needed" : "");
}

async function route() {
  clearInterval(timer);
  const gen = ++generation;
  if (session.auth && !token()) { signIn(); return; }
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#sign-out").hidden = !session.auth;
  // A link with a malformed escape (`#/players/%E0`) names no page: decodeURIComponent throws.
  let parts = null;
  try { parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent); } catch { /* no page */ }
  const [name, a, b] = parts || ["unknown"];
  const current = name || "queues";
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.view === current);
  const view = $("#view");
  view.dataset.view = current;
  try {
    let refresh = null;
    if (current === "queues") refresh = await viewQueues(view, gen);
    else if (current === "matches" && a) refresh = await viewMatch(view, gen, a);
    else if (current === "matches") refresh = await viewMatches(view, gen);
    else if (current === "players" && a) refresh = await viewPlayer(view, gen, a, b);
    else if (current === "players") refresh = await viewPlayers(view, gen);
    else if (current === "leaderboards") refresh = await viewLeaderboards(view, gen, a);
    else if (current === "seasons") refresh = await viewSeasons(view, gen);
    else view.replaceChildren(h("p", {}, "Unknown page."));
    if (refresh && gen === generation) {
      timer = setInterval(() => refresh().catch((e) => setStatus("refresh failed: " + e.message)), REFRESH_MS);
    }
  } catch (e) {
    if (gen === generation) showError(view, e);
  }
}

async function start() {
  $("#login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    $("#token").value = "";
    route();
  });
  $("#sign-out").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); signIn(); });
  window.addEventListener("hashchange", route);
  try {
    session = await api("session");
  } catch (e) {
    $("#view").replaceChildren(h("p", { class: "error" }, "Cannot reach the server: " + e.message));
    return;
  }
  document.title = "matchmaker " + session.version + " console";
  route();
}

start();
