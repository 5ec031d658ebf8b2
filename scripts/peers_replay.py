#!/usr/bin/env python3
"""Peers for `matchmaker replay`: the same history, the same scoring start and the same measures
as src/sim/measures.rs, for

- openskill (PyPI, Plackett-Luce, its default model, default parameters),
- openskill Bradley-Terry full (default parameters),
- trueskill (PyPI, default environment; win probability by the formula in its documentation),
- plain Elo with K = 32 (1500 start; a team is the mean of its members, every member moves by the
  team's change).

Each match is predicted before it is applied; matches before --score-from only warm up.

Measures, written exactly as in src/sim/measures.rs: every match is the binary event "the
favourite (highest predicted win probability) finished first"; p = favourite's probability
renormalised over the teams; y = 1 won, 0 lost, 1/k when k teams share first; a prediction of
exactly 1/2 in a two-team match counts y = 1/2. Log loss -[y ln p + (1-y) ln(1-p)] with p clamped to
[1e-15, 1-1e-15]; Brier (p-y)^2; accuracy mean y; ECE over 10 equal bins of p on [1/2, 1].

The history is in the format of docs/match-history.md; the published figures are in
docs/replay-results.md.

Usage: pip install -r scripts/peers-requirements.txt
       python3 scripts/peers_replay.py HISTORY.jsonl \
           --score-from 2010-01-01 [--json] [--write-predictions FILE]
           [--ours "target/release/matchmaker" [--tune] [-- OURS REPLAY ARGUMENTS...]]

--write-predictions FILE writes every peer's prediction of every match (one JSON object per
peer: {"system": "peer: ...", "win_probability": [[p_team0, p_team1, ...], ...]}, in file
order), the input of `matchmaker replay --peers FILE`.

With --ours, the same run also calls
`OURS replay FILE --score-from DATE --json --peers PREDICTIONS --baseline best-peer` with the
arguments after `--` (default `--system all`; plus --tune if given): our systems are scored
next to the peers by the same code, each with its paired difference in log loss against the
best peer and that difference's 95% interval (matches resampled in blocks by week), and all
rows print in one table.
"""

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
from importlib import metadata

BINS = 10
EPS = 1e-15


class Accumulator:
    def __init__(self):
        self.n = 0
        self.log_loss = 0.0
        self.brier = 0.0
        self.correct = 0.0
        self.bins = [[0, 0.0, 0.0] for _ in range(BINS)]

    def add(self, p, y):
        self.n += 1
        q = min(max(p, EPS), 1.0 - EPS)
        self.log_loss += -(y * math.log(q) + (1.0 - y) * math.log(1.0 - q))
        self.brier += (p - y) ** 2
        self.correct += y
        b = math.floor((p - 0.5) * 2.0 * BINS + 1e-9)
        b = 0 if (b != b or b < 0) else min(int(b), BINS - 1)
        self.bins[b][0] += 1
        self.bins[b][1] += p
        self.bins[b][2] += y

    def summary(self):
        n = self.n
        if n == 0:
            return dict(n=0, log_loss=0.0, brier=0.0, accuracy=0.0, ece=0.0)
        ece = sum((c / n) * abs(sp / c - sy / c) for c, sp, sy in self.bins if c > 0)
        return dict(n=n, log_loss=self.log_loss / n, brier=self.brier / n,
                    accuracy=self.correct / n, ece=ece)


def score(win_probability, placements):
    """(p, y) of the favourite, as measures::score."""
    total = sum(win_probability)
    fav = 0
    for i, p in enumerate(win_probability):
        if p > win_probability[fav]:
            fav = i
    p = win_probability[fav] / total
    best = min(placements)
    firsts = sum(1 for x in placements if x == best)
    if len(win_probability) == 2 and win_probability[0] == win_probability[1]:
        y = 0.5
    elif placements[fav] == best:
        y = 1.0 / firsts
    else:
        y = 0.0
    return p, y


def day(time):
    """The YYYY-MM-DD day of a `time` field: a date string or unix seconds (docs/match-history.md)."""
    if isinstance(time, str):
        return time[:10]
    return datetime.datetime.fromtimestamp(math.floor(time / 86400) * 86400, datetime.timezone.utc).strftime("%Y-%m-%d")


def read(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            out.append((day(d["time"]), [[str(p) for p in t] for t in d["teams"]], d["placements"]))
    return out


def version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


class OpenSkill:
    def __init__(self, model_name):
        from openskill import models
        self.model = getattr(models, model_name)()
        self.name = "openskill-" + {"PlackettLuce": "pl", "BradleyTerryFull": "bt"}[model_name]
        self.label = "peer: openskill %s %s" % (
            version("openskill"),
            {"PlackettLuce": "plackett-luce", "BradleyTerryFull": "bradley-terry"}[model_name])
        self.ratings = {}

    def get(self, pid):
        r = self.ratings.get(pid)
        if r is None:
            r = self.model.rating(name=pid)
            self.ratings[pid] = r
        return r

    def step(self, teams, placements):
        rs = [[self.get(p) for p in t] for t in teams]
        pred = self.model.predict_win(rs)
        new = self.model.rate(rs, ranks=list(placements))
        for t, team in zip(teams, new):
            for pid, r in zip(t, team):
                self.ratings[pid] = r
        return pred


class TrueSkill:
    name = "trueskill"

    def __init__(self):
        self.label = "peer: trueskill %s" % version("trueskill")
        import trueskill
        self.ts = trueskill
        self.env = trueskill.TrueSkill()
        self.ratings = {}

    def get(self, pid):
        r = self.ratings.get(pid)
        if r is None:
            r = self.env.create_rating()
            self.ratings[pid] = r
        return r

    def step(self, teams, placements):
        rs = [[self.get(p) for p in t] for t in teams]
        beta = self.env.beta
        if len(rs) == 2:
            dmu = sum(r.mu for r in rs[0]) - sum(r.mu for r in rs[1])
            s2 = sum(r.sigma ** 2 for t in rs for r in t)
            size = len(rs[0]) + len(rs[1])
            p0 = self.env.cdf(dmu / math.sqrt(size * beta * beta + s2))
            pred = [p0, 1.0 - p0]
        else:
            # Pairwise shares, as openskill and src/rating do for more than two teams.
            n = len(rs)
            pred = [0.0] * n
            for i in range(n):
                for j in range(i + 1, n):
                    dmu = sum(r.mu for r in rs[i]) - sum(r.mu for r in rs[j])
                    s2 = sum(r.sigma ** 2 for r in rs[i] + rs[j])
                    pij = self.env.cdf(dmu / math.sqrt((len(rs[i]) + len(rs[j])) * beta * beta + s2))
                    pred[i] += pij
                    pred[j] += 1 - pij
            pred = [x / (n * (n - 1) / 2) for x in pred]
        ranks = [p - 1 for p in placements]
        new = self.env.rate(rs, ranks=ranks)
        for t, team in zip(teams, new):
            for pid, r in zip(t, team):
                self.ratings[pid] = r
        return pred


class Elo:
    def __init__(self, k):
        self.k = k
        self.name = "elo-k%g" % k
        self.label = "peer: elo k=%g" % k
        self.ratings = {}

    def step(self, teams, placements):
        tr = [sum(self.ratings.get(p, 1500.0) for p in t) / len(t) for t in teams]
        n = len(teams)
        pred = [0.0] * n
        delta = [0.0] * n
        for i in range(n):
            for j in range(i + 1, n):
                e = 1.0 / (1.0 + 10.0 ** ((tr[j] - tr[i]) / 400.0))
                pred[i] += e
                pred[j] += 1 - e
                s = 1.0 if placements[i] < placements[j] else (0.5 if placements[i] == placements[j] else 0.0)
                d = self.k / (n - 1) * (s - e)
                delta[i] += d
                delta[j] -= d
        pred = [x / (n * (n - 1) / 2) for x in pred]
        for t, d in zip(teams, delta):
            for pid in t:
                self.ratings[pid] = self.ratings.get(pid, 1500.0) + d
        return pred


def run(system, matches, score_from, predictions=None):
    acc = Accumulator()
    t = time.perf_counter()
    kept = []
    for i, (day, teams, placements) in enumerate(matches):
        pred = system.step(teams, placements)
        if predictions is not None:
            kept.append([float(p) for p in pred])
        if day >= score_from:
            acc.add(*score(pred, placements))
    out = dict(system=system.name, **acc.summary(), seconds=time.perf_counter() - t)
    if predictions is not None:
        predictions.append(dict(system=system.label, win_probability=kept))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--score-from", default="0000-00-00")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", help="comma-separated subset: openskill-pl,openskill-bt,trueskill,elo-k32")
    ap.add_argument("--ours", help="command that runs matchmaker (e.g. target/release/matchmaker)")
    ap.add_argument("--tune", action="store_true", help="pass --tune to our replay")
    ap.add_argument("--write-predictions", metavar="FILE",
                    help="write every peer's per-match predictions (input of replay --peers)")
    argv = sys.argv[1:]
    ours_args = ["--system", "all"]
    if "--" in argv:
        cut = argv.index("--")
        argv, ours_args = argv[:cut], argv[cut + 1:]
    args = ap.parse_args(argv)
    matches = read(args.file)
    systems = [OpenSkill("PlackettLuce"), OpenSkill("BradleyTerryFull"), TrueSkill(), Elo(32.0)]
    if args.only:
        keep = set(args.only.split(","))
        systems = [s for s in systems if s.name in keep]
    keep_predictions = args.write_predictions or args.ours
    predictions = [] if keep_predictions else None
    rows = [run(s, matches, args.score_from, predictions) for s in systems]
    written = None
    if keep_predictions:
        if args.write_predictions:
            written = args.write_predictions
        else:
            fd, written = tempfile.mkstemp(suffix=".jsonl", prefix="peers-")
            os.close(fd)
        with open(written, "w") as f:
            for p in predictions:
                f.write(json.dumps(p) + "\n")
    if args.ours:
        import shlex
        import subprocess
        cmd = shlex.split(args.ours) + ["replay", args.file, "--json", "--peers", written,
                                        "--baseline", "best-peer"] + ours_args
        if args.score_from != "0000-00-00":
            cmd += ["--score-from", args.score_from]
        if args.tune:
            cmd.append("--tune")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows = [json.loads(line) for line in out.splitlines()]
        if not args.write_predictions:
            os.remove(written)
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print("%-34s %7s %8s %7s %8s %7s  %s" % (
            "system", "n", "logloss", "brier", "accuracy", "ece", "vs best peer (95% interval)"))
        for r in rows:
            d = r.get("vs_baseline")
            vs = "%+.4f [%+.4f, %+.4f]" % (d["mean"], d["low"], d["high"]) if d else ""
            print("%-34s %7d %8.4f %7.4f %8.4f %7.4f  %s" % (
                r.get("label", r["system"]), r["n"], r["log_loss"], r["brier"], r["accuracy"],
                r["ece"], vs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
