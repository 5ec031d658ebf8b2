#!/usr/bin/env python3
"""Expected values for the Weng-Lin known-answer tests (src/rating/weng_lin.rs).

Run:
    python3 -m venv /tmp/osk && /tmp/osk/bin/pip install -r scripts/requirements.txt
    /tmp/osk/bin/python scripts/openskill_reference.py

Model options, chosen to match `weng_lin::Config::default()`:
    mu=25, sigma=25/3, beta=25/6, kappa=0.0001, tau=0 (unless a case says otherwise),
    limit_sigma=False (unless a case says otherwise), balance=False, margin=0 (default),
    default gamma (sigma_i / c), no weights, no scores: placements are passed as `ranks`
    (1 = first, equal = tie). ThurstoneMostellerFull uses its default epsilon=0.1, which is our
    `draw_margin`.

Prints one Rust array entry per case: (model, teams as [(mu, sigma)], ranks, tau, limit_sigma,
expected [(mu, sigma)]). Paste the output into `OPENSKILL_CASES`.
"""

import importlib.metadata

from openskill.models import BradleyTerryFull, PlackettLuce, ThurstoneMostellerFull

MODELS = {
    "BradleyTerry": BradleyTerryFull,
    "PlackettLuce": PlackettLuce,
    "ThurstoneMosteller": ThurstoneMostellerFull,
}

# (name, model, teams [(mu, sigma)], ranks, tau, limit_sigma)
D = (25.0, 25.0 / 3.0)
CASES = [
    ("1v1 new players, a wins", "PlackettLuce", [[D], [D]], [1, 2], 0.0, False),
    ("1v1 rated, upset", "PlackettLuce", [[(30.0, 4.0)], [(22.0, 6.5)]], [2, 1], 0.0, False),
    ("1v1 draw", "PlackettLuce", [[(28.0, 5.0)], [(24.0, 7.0)]], [1, 1], 0.0, False),
    ("2v2", "PlackettLuce", [[(27.0, 6.0), (23.0, 8.0)], [(25.0, 3.0), (26.0, 5.5)]], [1, 2], 0.0, False),
    ("3 teams with a tie, uneven sizes", "PlackettLuce",
     [[(30.0, 3.0)], [(24.0, 7.0), (20.0, 8.0)], [(26.0, 5.0), (25.0, 6.0), (21.0, 4.0)]], [2, 1, 2], 0.0, False),
    ("4-player free-for-all, tie for 2nd", "PlackettLuce",
     [[(25.0, 8.0)], [(28.0, 4.0)], [(22.0, 6.0)], [(31.0, 2.5)]], [3, 2, 1, 2], 0.0, False),
    ("tau and limit_sigma", "PlackettLuce", [[(27.0, 1.0), (23.0, 0.5)], [(25.0, 3.0)]], [1, 2], 25.0 / 300.0, True),
    ("1v1 new players, a wins", "BradleyTerry", [[D], [D]], [1, 2], 0.0, False),
    ("2v2", "BradleyTerry", [[(27.0, 6.0), (23.0, 8.0)], [(25.0, 3.0), (26.0, 5.5)]], [1, 2], 0.0, False),
    ("uneven 3v1", "BradleyTerry", [[(20.0, 7.0), (22.0, 6.0), (18.0, 8.0)], [(35.0, 3.0)]], [2, 1], 0.0, False),
    ("3 teams with a tie, uneven sizes", "BradleyTerry",
     [[(30.0, 3.0)], [(24.0, 7.0), (20.0, 8.0)], [(26.0, 5.0), (25.0, 6.0), (21.0, 4.0)]], [2, 1, 2], 0.0, False),
    ("1v1 draw", "BradleyTerry", [[(28.0, 5.0)], [(24.0, 7.0)]], [1, 1], 0.0, False),
    ("1v1 new players, a wins", "ThurstoneMosteller", [[D], [D]], [1, 2], 0.0, False),
    ("1v1 draw", "ThurstoneMosteller", [[(28.0, 5.0)], [(24.0, 7.0)]], [1, 1], 0.0, False),
    ("2v2", "ThurstoneMosteller", [[(27.0, 6.0), (23.0, 8.0)], [(25.0, 3.0), (26.0, 5.5)]], [1, 2], 0.0, False),
    ("3 teams with a tie, uneven sizes", "ThurstoneMosteller",
     [[(30.0, 3.0)], [(24.0, 7.0), (20.0, 8.0)], [(26.0, 5.0), (25.0, 6.0), (21.0, 4.0)]], [2, 1, 2], 0.0, False),
]


def main() -> None:
    print(f"// openskill {importlib.metadata.version('openskill')}")
    for name, model_name, teams, ranks, tau, limit_sigma in CASES:
        model = MODELS[model_name](
            mu=25.0, sigma=25.0 / 3.0, beta=25.0 / 6.0, kappa=0.0001,
            tau=tau, limit_sigma=limit_sigma, balance=False,
        )
        rated = [[model.rating(mu=m, sigma=s) for (m, s) in team] for team in teams]
        out = model.rate(rated, ranks=list(ranks))
        fmt_team = lambda t: "&[" + ", ".join(f"({m!r}, {s!r})" for (m, s) in t) + "]"
        teams_src = "&[" + ", ".join(fmt_team(t) for t in teams) + "]"
        expected = "&[" + ", ".join(
            "&[" + ", ".join(f"({p.mu!r}, {p.sigma!r})" for p in team) + "]" for team in out
        ) + "]"
        print(f"    // {model_name}: {name}")
        print(f"    Case {{ model: Model::{model_name}, teams: {teams_src}, ranks: &{list(ranks)}, "
              f"tau: {tau!r}, limit_sigma: {'true' if limit_sigma else 'false'},\n"
              f"        expected: {expected} }},")


if __name__ == "__main__":
    main()
