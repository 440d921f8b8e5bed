"""Speed of the BNN closure MILP: HiGHS vs SCIP, interval vs LP-tightened bounds (same process).

For each published policy (mean weights, the paper's largest verified ε), an invariant candidate
``g`` is fitted the way the learner's bootstrap does it (torch, logistic loss on states labelled by
mean-policy Monte-Carlo rollouts: 1 = stays safe), so ``g`` looks trained, not random. The closure
query of :class:`safecert.bnn.verifier.Verifier` is then solved by each configuration to optimality
(objective max g(x) − g(x') + exit depth) and, for HiGHS, also to the first feasible point; the
full three-check ``Verifier.check`` is timed too. All timings are wall-clock seconds on the same
machine in one process; ratios are against HiGHS with interval bounds.

    .venv/bin/python benchmarks/bnn_encoding_speed.py --out benchmarks/RESULTS_bnn_verifier.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rich.progress import Progress

from safecert.bnn.dynamics import System
from safecert.bnn.networks import ReluNetwork, forward, load_policy
from safecert.bnn.solvers import solve
from safecert.bnn.spec import default_spec
from safecert.bnn.system import get_benchmark
from safecert.bnn.verifier import Verifier

PAPER_EPS = {
    "lds": "2sigma",
    "lds_all": "0.5sigma",
    "pend": "2sigma",
    "pend_all": "1.5sigma",
    "car": "2sigma",
    "car_all": "1.5sigma",
}
HORIZON = {"lds": 100, "pend": 100, "car": 6}


def mc_labels(
    bench: System, policy: ReluNetwork, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """States of ``B`` labelled 1 when the mean-policy rollout never meets ``X_u`` (and stays in B)."""
    x = bench.box.sample(rng, n, bench.integer)
    cur, safe = x.copy(), ~bench.in_unsafe(x)
    for _ in range(HORIZON[bench.name]):
        cur = bench.step(cur, policy.forward(cur))
        safe &= ~bench.in_unsafe(cur) & bench.in_box(cur)
    return x, safe.astype(np.float64)


def fit_invariant(x: np.ndarray, y: np.ndarray, hidden: int, seed: int) -> ReluNetwork:
    import torch

    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    ).double()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)[:, None]
    for _ in range(600):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt), yt)
        loss.backward()
        opt.step()
    return ReluNetwork.from_torch(net)


def run_config(verifier: Verifier, g: ReluNetwork, solver: str, first: bool, limit: float) -> dict:
    t0 = time.perf_counter()
    q = verifier.closure_query(g)
    build = time.perf_counter() - t0
    res = solve(q.milp, solver, time_limit_s=limit, stop_at_first=first)
    return {
        "solver": solver,
        "tighten": verifier.tighten,
        "first_feasible": first,
        "status": res.status,
        "optimal": res.optimal,
        "objective": res.objective,
        "build_s": build,
        "solve_s": res.runtime_s,
        "n_vars": q.milp.n_vars,
        "n_rows": q.milp.n_rows,
        "n_binaries": q.milp.n_integer,
    }


def sampled_closure_violations(
    bench: System, box, g: ReluNetwork, rng: np.random.Generator, n: int = 100_000
) -> tuple[int, int]:
    """Independent check of a closure proof: ``n`` states of ``Inv`` (from ``step_box``), a fresh
    uniform weight draw from the box per batch of 250; returns (violations, samples)."""
    bad = seen = 0
    while seen < n:
        x = bench.step_box.sample(rng, 1000, bench.integer)
        x = x[g.forward(x)[:, 0] >= 0.0][:250]
        x1 = bench.step(x, forward(box.sample_uniform(rng), x))
        bad += int(np.sum((g.forward(x1)[:, 0] < 0.0) | ~bench.in_box(x1)))
        seen += len(x)
    return bad, seen


def proof_rows(paths: list[Path], limit: float) -> list[dict]:
    """Proof-side timings: the closure query of *certified* invariants (a bnn ``certificate.json``
    written by ``safecert bnn verify``), per configuration; these queries are infeasible."""
    rows = []
    for path in paths:
        cert = json.loads(path.read_text())
        res = cert["result"]
        policy_name = cert["parameters"]["policy"].removeprefix("benchmark:")
        eps = (
            f"{res['epsilon']['value']}sigma"
            if res["epsilon"]["unit"] == "sigma"
            else str(res["epsilon"]["value"])
        )
        bench, policy = get_benchmark(policy_name), load_policy(policy_name)
        box = default_spec(policy_name).box(policy, eps)
        g = ReluNetwork.from_lists(res["invariant"]["layers"])
        bad, seen = sampled_closure_violations(bench, box, g, np.random.default_rng(0))
        print(
            f"proof {policy_name:9s} {eps} sampled closure: {bad} violations in {seen} (x ∈ Inv, w ∈ box)"
        )
        for solver, tighten in (("highs", False), ("highs", True), ("scip", False), ("scip", True)):
            v = Verifier(bench, box, solver=solver, tighten=tighten, time_limit_s=limit)
            row = run_config(v, g, solver, True, limit)
            rows.append(
                {
                    "policy": policy_name,
                    "epsilon": eps,
                    "proof": str(path),
                    "sampled": [bad, seen],
                    **row,
                }
            )
            print(
                f"proof {policy_name:9s} {eps} {solver:5s} tighten={tighten!s:5s} {row['status']:10s} "
                f"build {row['build_s']:.2f}s solve {row['solve_s']:.2f}s bin {row['n_binaries']}"
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_bnn_verifier.json"))
    ap.add_argument("--limit", type=float, default=60.0, help="time limit per solve, seconds")
    ap.add_argument("--policies", nargs="*", default=list(PAPER_EPS))
    ap.add_argument(
        "--certificates",
        nargs="*",
        type=Path,
        default=[],
        help="bnn certificates: time their proofs",
    )
    ap.add_argument("--proofs-only", action="store_true", help="skip the fitted-candidate rows")
    args = ap.parse_args()
    if args.proofs_only:
        rows = proof_rows(args.certificates, args.limit)
        args.out.write_text(json.dumps({"time_limit_s": args.limit, "rows": rows}, indent=1))
        return
    rng = np.random.default_rng(2021)
    rows = []
    configs = [
        ("highs", False, False),
        ("highs", True, False),
        ("scip", False, False),
        ("scip", True, False),
        ("highs", False, True),
        ("highs", True, True),
    ]
    with Progress() as progress:
        task = progress.add_task("closure MILPs", total=len(args.policies) * (len(configs) + 1))
        for name in args.policies:
            bench, policy = get_benchmark(name), load_policy(name)
            box = default_spec(name).box(policy, PAPER_EPS[name])
            x, y = mc_labels(bench, policy, rng, 4000)
            g = fit_invariant(x, y, 32 if bench.name == "car" else 12, seed=0)
            acc = float(np.mean((g.forward(x)[:, 0] >= 0) == (y > 0.5)))
            for solver, tighten, first in configs:
                v = Verifier(bench, box, solver=solver, tighten=tighten, time_limit_s=args.limit)
                row = run_config(v, g, solver, first, args.limit)
                rows.append(
                    {"policy": name, "epsilon": PAPER_EPS[name], "fit_accuracy": acc, **row}
                )
                progress.advance(task)
            t0 = time.perf_counter()
            verdict = Verifier(bench, box, time_limit_s=args.limit).check(g)
            rows.append(
                {
                    "policy": name,
                    "epsilon": PAPER_EPS[name],
                    "fit_accuracy": acc,
                    "solver": "highs",
                    "full_check": type(verdict).__name__,
                    "checks": [
                        (c.condition, c.status, round(c.runtime_s, 4)) for c in verdict.checks
                    ],
                    "wall_s": time.perf_counter() - t0,
                }
            )
            progress.advance(task)
    rows += proof_rows(args.certificates, args.limit)
    args.out.write_text(json.dumps({"time_limit_s": args.limit, "rows": rows}, indent=1))
    for r in rows:
        if "proof" in r:
            continue
        if "solve_s" in r:
            print(
                f"{r['policy']:9s} {r['solver']:5s} tighten={r['tighten']!s:5s} first={r['first_feasible']!s:5s} "
                f"{r['status']:10s} build {r['build_s']:.2f}s solve {r['solve_s']:.2f}s bin {r['n_binaries']}"
            )
        else:
            print(
                f"{r['policy']:9s} full check: {r['full_check']} in {r['wall_s']:.2f}s {r['checks']}"
            )


if __name__ == "__main__":
    main()
