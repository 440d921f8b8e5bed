"""A vendor policy as a program: newline-delimited JSON on stdin/stdout (safecert's exec: oracle).

Reads one request per line, ``{"observations": [[...], ...]}``, and answers each with one line
``{"actions": [[...], ...]}``. The policy is chosen with ``--policy``:

- ``onnx:FILE`` — an ONNX model (onnxruntime, float32), e.g. ``onnx:cheetah_safe.onnx``;
- ``point:NAME`` — a scripted SafePointGoal policy from ``point_policies.py`` (``goal_seeker``,
  ``hazard_avoider``).

Relative files resolve from this script's folder. For testing safecert, ``--crash-after N``,
``--hang-after N`` and ``--garbage-after N`` make the program exit with code 3, stop answering, or
answer with a non-JSON line once it has answered N requests.

    python3 exec_vendor.py --policy point:hazard_avoider
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def load_policy(name: str) -> Callable[[np.ndarray], np.ndarray]:
    kind, _, target = name.partition(":")
    if kind == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(
            str(HERE / target), options, providers=["CPUExecutionProvider"]
        )
        input_name = session.get_inputs()[0].name
        return lambda obs: session.run(None, {input_name: obs.astype(np.float32)})[0]
    if kind == "point":
        sys.path.insert(0, str(HERE))
        import point_policies

        return getattr(point_policies, target)
    raise SystemExit(f"unknown --policy {name!r}; use onnx:FILE or point:NAME")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="point:hazard_avoider")
    parser.add_argument("--crash-after", type=int, default=-1)
    parser.add_argument("--hang-after", type=int, default=-1)
    parser.add_argument("--garbage-after", type=int, default=-1)
    args = parser.parse_args()
    policy = load_policy(args.policy)
    for answered, line in enumerate(sys.stdin):
        if answered == args.crash_after:
            print(f"vendor: simulated crash after {answered} requests", file=sys.stderr)
            sys.exit(3)
        if answered == args.hang_after:
            time.sleep(3600)
        if answered == args.garbage_after:
            print("<html>this is not JSON</html>", flush=True)
            continue
        obs = np.asarray(json.loads(line)["observations"], dtype=np.float64)
        actions = policy(obs) if len(obs) else np.zeros((0,))
        print(json.dumps({"actions": np.asarray(actions).tolist()}), flush=True)


if __name__ == "__main__":
    main()
