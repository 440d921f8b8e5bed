"""Edit every field of a certificate by hand, one at a time, and list the edits `safecert verify`
does not catch (exit 0). One representative per field shape (list elements beyond the first are
skipped). Numbers are scaled, strings extended, booleans flipped, nulls set.

    python benchmarks/forgery_audit.py RUN_DIR result|parameters|inputs|seed|verdict [VERIFY ARGS…]
"""

import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

from safecert.cli.main import main


def leaves(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from leaves(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from leaves(v, path + (i,))
    else:
        yield path, d


def mutate(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v * 1.5 + 0.01
    if isinstance(v, str):
        return v + "x"
    if v is None:
        return 0.5
    return v


def setp(d, path, v):
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = v


run, prefix, extra = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
orig = json.loads((run / "certificate.json").read_text())
seen: set = set()
survivors = []
n = 0
work = Path(tempfile.mkdtemp(prefix="forgery_audit_")) / "run"
for path, v in leaves(orig):
    if path[0] != prefix:
        continue
    # one representative per "shape" (drop list indices beyond the first)
    key = tuple(p if isinstance(p, str) else 0 for p in path)
    if key in seen:
        continue
    seen.add(key)
    n += 1
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(run, work)
    d = json.loads(json.dumps(orig))
    setp(d, path, mutate(v))
    (work / "certificate.json").write_text(json.dumps(d, sort_keys=True, indent=2))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["verify", str(work / "certificate.json"), *extra])
        except BaseException as e:
            rc = f"EXC {type(e).__name__}: {e}"
    if rc not in (1, 2):
        survivors.append((".".join(map(str, path)), v, rc))
print(f"{run} {prefix}: {n} fields tried; survivors:")
for s in survivors:
    print("  ", s)
