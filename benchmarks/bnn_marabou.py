"""An external verifier on `safecert bnn export`: Marabou (maraboupy 2.0, from PyPI) agrees.

1. Certifies the double integrator of ``examples/bnn/double_integrator`` at ``--epsilon`` (default
   0.1σ) with ``safecert bnn verify`` (a real subprocess), exports the certificate with
   ``safecert bnn export`` and runs Marabou on ``closed_loop.onnx`` with every VNN-LIB file. A SAFE
   certificate claims each query UNSAT; Marabou must say ``unsat`` for every one.
2. Negative control (the check can fail): the same certified invariant exported over a wider weight
   box (``--control-epsilon``, default 3σ) where the engine's own verifier finds a closure
   counterexample. Marabou must say ``sat`` on ``closure.vnnlib``; its witness ``(x, s)`` is
   replayed by onnxruntime on the exported graph and by the engine's float64 step with the policy's
   Bayesian pre-activations set to ``s``, and must violate the relaxed closure condition.

maraboupy is not a dependency of safecert: this script installs ``maraboupy==2.0.0`` into the
running interpreter's environment (``python -m pip install``) when it is missing.

    .venv/bin/python benchmarks/bnn_marabou.py --out /tmp/bnn_marabou --json /tmp/bnn_marabou.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DI = ROOT / "examples" / "bnn" / "double_integrator"
SAFECERT = [sys.executable, "-m", "safecert.cli.main"]


def ensure_marabou() -> None:
    if importlib.util.find_spec("maraboupy") is None:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "maraboupy==2.0.0"], check=True
        )


def marabou(onnx_path: Path, vnnlib: Path, timeout_s: int) -> tuple[str, np.ndarray | None, float]:
    """Marabou's answer on one query: ``sat``/``unsat``/other, the input witness, seconds."""
    from maraboupy import Marabou

    net = Marabou.read_onnx(str(onnx_path))
    opts = Marabou.createOptions(verbosity=0, timeoutInSeconds=timeout_s)
    t = time.perf_counter()
    answer, vals, _ = net.solve(propertyFilename=str(vnnlib), options=opts, verbose=False)
    took = time.perf_counter() - t
    witness = None
    if answer == "sat":
        witness = np.array([vals[int(v)] for v in np.ravel(net.inputVars[0])])
    return answer, witness, took


def certify_and_export(out: Path, epsilon: str) -> Path:
    work = out / "run"
    work.mkdir(parents=True, exist_ok=True)
    for f in ("double_integrator.toml", "policy.onnx"):
        shutil.copyfile(DI / f, work / f)
    res = subprocess.run(
        [*SAFECERT, "bnn", "verify", str(work / "double_integrator.toml"), "--epsilon", epsilon,
         "--out", str(work / "out"), "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    verdict = json.loads(res.stdout)["verdict"]
    if verdict != "SAFE":
        raise SystemExit(f"the double integrator at {epsilon} is {verdict}; pick a smaller ε")
    exp = out / "export"
    subprocess.run(
        [*SAFECERT, "bnn", "export", str(work / "out" / "certificate.json"), "--out", str(exp)],
        check=True, capture_output=True,
    )  # fmt: skip
    return work / "out" / "certificate.json"


def control_export(cert: Path, out: Path, epsilon: str) -> tuple[Path, object]:
    """The certified invariant over a wider box (not claimed by any certificate)."""
    from safecert.bnn.check import parameters_config
    from safecert.bnn.config import bayesian_spec
    from safecert.bnn.export import Claim, Header, certificate_claim, export
    from safecert.bnn.networks import read_policy_file
    from safecert.bnn.verifier import Counterexample, Verifier
    from safecert.certificate import read_certificate

    claim = certificate_claim(cert)
    parsed = read_certificate(cert)
    cfg = parameters_config(parsed.parameters)
    mean = read_policy_file(cert.parent / "policy.onnx")
    box = bayesian_spec(cfg, mean).box(mean, epsilon)
    engine = Verifier(claim.system, box).check(claim.invariant)
    if not isinstance(engine, Counterexample) or engine.condition != "closure":
        raise SystemExit(f"control ε {epsilon}: the engine finds no closure counterexample")
    header = Header("UNKNOWN", epsilon, claim.header.margin, "negative control")
    d = out / "control"
    export(Claim(claim.system, box, claim.invariant, header), d, force=True)
    return d, (claim, box)


def replay_witness(d: Path, witness: np.ndarray, claim, box) -> dict:
    """The Marabou witness on the exported graph (onnxruntime) and on the engine's step."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(d / "closed_loop.onnx"))
    (y,) = sess.run(None, {"X": witness[None, :]})
    system, g = claim.system, claim.invariant
    n = system.state_dim
    x, s = witness[:n], witness[n:]
    m = claim.header.margin
    last = len(box.lower) - 1
    only_last = [k for k in range(len(box.lower)) if box.is_bayesian(k)] == [last]
    engine_ok = None
    if only_last:  # u = s exactly: the engine's own step, and s within the exact interval
        a = x
        for wl, bl in box.lower[:-1]:
            a = np.maximum(a @ wl + bl, 0.0)
        (wl, bl), (wu, bu) = box.lower[-1], box.upper[-1]
        z_lo = np.minimum(wl * a[:, None], wu * a[:, None]).sum(0) + bl
        z_hi = np.maximum(wl * a[:, None], wu * a[:, None]).sum(0) + bu
        in_box = bool(np.all(s >= z_lo - 1e-7) and np.all(s <= z_hi + 1e-7))
        x1 = system.step(x[None, :], s[None, :])[0]
        g0, g1 = float(g.forward(x[None])[0, 0]), float(g.forward(x1[None])[0, 0])
        leaves = bool(np.any((x1 >= system.box.hi - m) | (x1 <= system.box.lo + m)))
        engine_ok = in_box and g0 >= -m - 1e-7 and (g1 <= m + 1e-7 or leaves)
    return {
        "x": x.tolist(),
        "onnx_g_x": float(y[0, 0]),
        "onnx_g_x_next": float(y[0, 1]),
        "engine_replay_violates": engine_ok,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bnn_marabou"))
    ap.add_argument("--epsilon", default="0.1sigma")
    ap.add_argument("--control-epsilon", default="3sigma")
    ap.add_argument("--timeout", type=int, default=600, help="Marabou seconds per query")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    ensure_marabou()
    if args.out.exists():
        shutil.rmtree(args.out)
    t = time.perf_counter()
    cert = certify_and_export(args.out, args.epsilon)
    certify_s = time.perf_counter() - t
    rows = []
    onnx_path = args.out / "export" / "closed_loop.onnx"
    for f in sorted((args.out / "export").glob("*.vnnlib")):
        answer, _, took = marabou(onnx_path, f, args.timeout)
        rows.append({"query": f.name, "claimed": "unsat", "marabou": answer, "seconds": took})
        print(f"{args.epsilon} {f.name}: certificate unsat, Marabou {answer} ({took:.2f} s)")
    d, (claim, box) = control_export(cert, args.out, args.control_epsilon)
    answer, witness, took = marabou(d / "closed_loop.onnx", d / "closure.vnnlib", args.timeout)
    control = {"query": "closure.vnnlib", "epsilon": args.control_epsilon, "marabou": answer,
               "seconds": took}  # fmt: skip
    if witness is not None:
        control["witness"] = replay_witness(d, witness, claim, box)
    print(f"control {args.control_epsilon} closure.vnnlib: engine sat, Marabou {answer} "
          f"({took:.2f} s) {control.get('witness')}")  # fmt: skip
    agree = all(r["marabou"] == "unsat" for r in rows) and answer == "sat"
    agree = agree and bool(control.get("witness", {}).get("engine_replay_violates"))
    summary = {"epsilon": args.epsilon, "certify_s": certify_s, "queries": rows,
               "control": control, "agree": agree}  # fmt: skip
    print("AGREE" if agree else "DISAGREE")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
