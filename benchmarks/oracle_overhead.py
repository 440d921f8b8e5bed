"""Per-call overhead of each oracle kind, batch 1 and batch 64, against the bare policy call.

Every oracle serves the same scripted point policy (``hazard_avoider``, 14-dim observations) except
ONNX (``cheetah_fast.onnx``, 17-dim), whose baseline is the same model in a bare onnxruntime session.
The figure is the median wall time of ``oracle.act(obs)`` over ``--calls`` calls after a warm-up,
in the same process as the baseline (ratios are what to compare; the machine is shared and noisy).

Start-up of an exec vendor under its supervisor (:class:`safecert.procs.VendorProcess`) against the
same program started directly (``supervised=False``): start, one round trip, kill — for ``cat`` (the
supervisor's own cost stands out) and for the example vendor; supervised and direct starts
alternate, ``--starts`` of each, medians.

    .venv/bin/python benchmarks/oracle_overhead.py --calls 300 --json runs/oracle_overhead.json
    .venv/bin/python benchmarks/oracle_overhead.py --startup-only --starts 30
"""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
from safecert.procs import VendorProcess

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def median_us(fn, obs: np.ndarray, calls: int) -> float:
    for _ in range(10):
        fn(obs)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(obs)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def start_once(argv: list[str], request: bytes, supervised: bool) -> float:
    """Seconds from start to the first reply line, then kill (not timed)."""
    start = time.perf_counter()
    vendor = VendorProcess(argv, cwd=str(EXAMPLES), supervised=supervised)
    vendor.stdin.write(request)
    reply = vendor.stdout.readline()
    took = time.perf_counter() - start
    vendor.kill()
    for pipe in (vendor.stdin, vendor.stdout, vendor.stderr):
        pipe.close()
    if not reply:
        raise SystemExit(f"{argv[0]} gave no reply")
    return took


def startup_rows(starts: int) -> list[dict]:
    obs = json.dumps({"observations": np.zeros((1, 14)).tolist()}).encode() + b"\n"
    programs = {
        "cat": (["cat"], b"ping\n"),
        "exec_vendor.py": (
            [sys.executable, "vendors/exec_vendor.py", "--policy", "point:hazard_avoider"],
            obs,
        ),
    }
    rows = []
    for name, (argv, request) in programs.items():
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(starts):
            for supervised in (False, True):
                times[supervised].append(start_once(argv, request, supervised))
        direct, supervised = (float(np.median(times[k]) * 1e3) for k in (False, True))
        rows.append(
            {
                "program": name,
                "direct_ms": round(direct, 2),
                "supervised_ms": round(supervised, 2),
                "extra_ms": round(supervised - direct, 2),
                "ratio": round(supervised / direct, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--startup-only", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = startup_rows(args.starts)
    if not args.startup_only:
        rows += per_call_rows(args.calls)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


def per_call_rows(calls: int) -> list[dict]:
    sys.path.insert(0, str(EXAMPLES))
    import onnxruntime as ort
    from vendors.point_policies import hazard_avoider

    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "vendors" / "http_vendor.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        select.select([server.stdout], [], [], 60)
        url = server.stdout.readline().split()[-1]
        onnx_path = EXAMPLES / "vendors" / "cheetah_fast.onnx"
        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        kinds = {
            "python": ("python:vendors.point_policies:hazard_avoider", hazard_avoider, 14),
            "exec": (
                "exec:python3 vendors/exec_vendor.py --policy point:hazard_avoider",
                hazard_avoider,
                14,
            ),
            "http": (f"{url}/act", hazard_avoider, 14),
            "onnx": (
                f"onnx:{onnx_path}",
                lambda o: session.run(None, {"observations": o.astype(np.float32)})[0],
                17,
            ),
        }
        rows = []
        for kind, (policy, bare, dim) in kinds.items():
            oracle = make_oracle(parse_oracle_spec(policy, base_dir=EXAMPLES))
            oracle.probe()
            for batch in (1, 64):
                obs = np.random.default_rng(0).normal(size=(batch, dim))
                base = median_us(bare, obs, calls)
                call = median_us(oracle.act, obs, calls)
                rows.append(
                    {
                        "kind": kind,
                        "batch": batch,
                        "bare_us": round(base, 1),
                        "oracle_us": round(call, 1),
                        "overhead_us": round(call - base, 1),
                        "oracle_us_per_obs": round(call / batch, 2),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            oracle.close()
    finally:
        server.kill()
        server.wait()
    return rows


if __name__ == "__main__":
    main()
