"""Validity of the sequential rules: wrong-PASS and wrong-FAIL rates ≤ δ, and the naive rule fails.

For each rule (CP looks with π² and uniform spending, beta-binomial mixture, betting, curtailed
fixed N) and true p ∈ {0.001, 0.01, 0.04, 0.05, 0.06, 0.2}:

- exact rates by dynamic programming (boundary rules), and
- Monte Carlo frequencies over ``--reps`` independent runs (every rule; betting only this way),

of PASS at p ≥ p* (wrong PASS) and FAIL at p ≤ p* (wrong FAIL), to be ≤ δ. The labelled negative
control recomputes Clopper–Pearson at the full δ after every batch of ``--batch`` episodes and
stops at the first PASS: its wrong-PASS rate at p just above p* exceeds δ.

    .venv/bin/python benchmarks/sequential_validity.py            # full: cap 10,000, 10,000 runs
    .venv/bin/python benchmarks/sequential_validity.py --quick    # cap 2,000, 2,000 runs

Writes ``benchmarks/out/sequential_validity.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from safecert.stats.betting import BettingRule
from safecert.stats.binomial import cp_interval
from safecert.stats.sequential import Boundaries, cp_boundaries
from safecert.stats.sequential_plan import make_rule, operating_characteristics

P_VALUES = (0.001, 0.01, 0.04, 0.05, 0.055, 0.06, 0.2)
OUT = Path(__file__).resolve().parent / "out"


def simulate_boundaries(
    b: Boundaries, p: float, reps: int, rng: np.random.Generator
) -> tuple[int, int, float]:
    """(PASS count, FAIL count, mean episodes) over ``reps`` runs; binomial steps between checks."""
    steps = np.diff(np.concatenate([[0], b.checks]))
    n_pass = n_fail = 0
    used = 0.0
    for start in range(0, reps, 1000):
        rows = min(1000, reps - start)
        k = np.cumsum(rng.binomial(steps, p, size=(rows, steps.size)), axis=1, dtype=np.int32)
        crossed = (k <= b.pass_max) | (k >= b.fail_min)
        has = crossed.any(axis=1)
        j = np.where(has, crossed.argmax(axis=1), steps.size - 1)
        kk = k[np.arange(rows), j]
        n_pass += int(np.sum(has & (kk <= b.pass_max[j])))
        n_fail += int(np.sum(has & (kk >= b.fail_min[j])))
        used += float(b.checks[j].sum())
    return n_pass, n_fail, used / reps


def simulate_betting(
    rule: BettingRule, p: float, reps: int, rng: np.random.Generator
) -> tuple[int, int, float]:
    n_pass = n_fail = 0
    used = 0.0
    for start in range(0, reps, 250):
        rows = min(250, reps - start)
        code, n = rule.stopping((rng.random((rows, rule.cap)) < p).astype(np.int8))
        n_pass += int(np.sum(code == 1))
        n_fail += int(np.sum(code == -1))
        used += float(n.sum())
    return n_pass, n_fail, used / reps


def naive_rule(p_star: float, delta: float, cap: int, batch: int) -> Boundaries:
    """NEGATIVE CONTROL (invalid): CP at the full δ after every batch."""
    checks = np.arange(batch, cap + 1, batch)
    return cp_boundaries(p_star, checks, np.full(checks.size, delta))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--p-star", type=float, default=0.05)
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=10, help="naive rule: look every BATCH episodes")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cap, reps = (2000, 2000) if args.quick else (10000, 10000)
    p_star, delta = args.p_star, args.delta
    rng = np.random.default_rng(args.seed)
    rules: dict[str, Boundaries | BettingRule] = {
        "looks (pi2 spending)": make_rule("looks", p_star, delta, cap),
        "looks (uniform spending)": make_rule("looks", p_star, delta, cap, {"spending": "uniform"}),
        "mixture": make_rule("mixture", p_star, delta, cap),
        "betting": make_rule("betting", p_star, delta, cap),
        "curtail (fixed N = cap)": make_rule("curtail", p_star, delta, cap),
        f"NAIVE: CP at full delta every {args.batch} (invalid)": naive_rule(
            p_star, delta, cap, args.batch
        ),
    }
    rows = []
    t0 = time.time()
    for name, rule in rules.items():
        for p in P_VALUES:
            if isinstance(rule, BettingRule):
                n_pass, n_fail, mean_n = simulate_betting(rule, p, reps, rng)
                exact = None
            else:
                n_pass, n_fail, mean_n = simulate_boundaries(rule, p, reps, rng)
                oc = operating_characteristics(rule, p)
                exact = {
                    "pass": oc.pass_prob,
                    "fail": oc.fail_prob,
                    "mean_episodes": oc.expected_episodes,
                }
            row = {
                "rule": name,
                "p": p,
                "reps": reps,
                "pass_freq": n_pass / reps,
                "fail_freq": n_fail / reps,
                "pass_ci95": list(_ci(n_pass, reps)),
                "fail_ci95": list(_ci(n_fail, reps)),
                "mean_episodes": mean_n,
                "exact": exact,
            }
            # the error that is possible at this p (PASS is wrong for p > p*, FAIL for p < p*;
            # at p = p* both are reported; curtail's FAIL is fixed N's "not PASS", no claim)
            errs = []
            if p >= p_star:
                errs.append(("wrong_pass", n_pass / reps, None if exact is None else exact["pass"]))
            if p <= p_star and not name.startswith("curtail"):
                errs.append(("wrong_fail", n_fail / reps, None if exact is None else exact["fail"]))
            row["errors"] = {
                k: {
                    "simulated": s,
                    "exact": e,
                    "within_delta": (e if e is not None else s) <= delta,
                }
                for k, s, e in errs
            }
            rows.append(row)
            print(
                f"{name:<44} p={p:<6} PASS {n_pass / reps:.4f}  FAIL {n_fail / reps:.4f}  "
                f"E[N] {mean_n:8.1f}  "
                + (
                    ""
                    if exact is None
                    else f"(exact PASS {exact['pass']:.4f} FAIL {exact['fail']:.4f})"
                ),
                flush=True,
            )
    OUT.mkdir(exist_ok=True)
    report = {
        "p_star": p_star,
        "delta": delta,
        "cap": cap,
        "reps": reps,
        "seed": args.seed,
        "seconds": time.time() - t0,
        "rows": rows,
    }
    (OUT / "sequential_validity.json").write_text(json.dumps(report, indent=2))
    _plot(report, OUT / "sequential_validity.png")
    valid = all(
        e["within_delta"]
        for r in rows
        if not r["rule"].startswith("NAIVE")
        for e in r["errors"].values()
    )
    naive_broken = any(
        e["within_delta"] is False
        for r in rows
        if r["rule"].startswith("NAIVE")
        for e in r["errors"].values()
    )
    print(f"valid rules within delta: {valid}; naive control exceeds delta: {naive_broken}")


def _ci(k: int, n: int) -> tuple[float, float]:
    iv = cp_interval(k, n, 0.05)
    return iv.lower, iv.upper


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = list(dict.fromkeys(r["rule"] for r in report["rows"]))
    for name in names:
        rs = [r for r in report["rows"] if r["rule"] == name]
        ps = [r["p"] for r in rs if r["p"] >= report["p_star"]]
        wp = [r["pass_freq"] for r in rs if r["p"] >= report["p_star"]]
        style = "k--" if name.startswith("NAIVE") else "-o"
        axes[0].plot(ps, wp, style, label=name)
        ps2 = [r["p"] for r in rs if r["p"] <= report["p_star"]]
        wf = [r["fail_freq"] for r in rs if r["p"] <= report["p_star"]]
        if not name.startswith("curtail"):
            axes[1].plot(ps2, wf, style, label=name)
    for ax, title in zip(axes, ("wrong PASS (p ≥ p*)", "wrong FAIL (p ≤ p*)"), strict=True):
        ax.axhline(report["delta"], color="red", lw=1, label="δ")
        ax.set_xlabel("true failure rate p")
        ax.set_ylabel("frequency")
        ax.set_title(title)
        ax.set_xscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"p* = {report['p_star']}, δ = {report['delta']}, cap {report['cap']}, {report['reps']} runs"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
