#!/bin/bash
# Helper H3's quiet window (issue 24.3): guard_latency.py five times, new and old alternately, then
# guard_tail.py once for each tree. old = `git archive 1a33e8c src | tar -x -C /tmp/beforeH3`.
# Usage: benchmarks/_experiments/H3_window.sh OUTDIR   (run from the repository root)
set -euo pipefail
out=${1:?OUTDIR}
old=/tmp/beforeH3/src
mkdir -p "$out"
stamp() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$out/log.txt"; }
for i in 1 2 3 4 5; do
  for tree in new old; do
    stamp "start guard_latency $tree $i"
    if [ "$tree" = new ]; then
      .venv/bin/python benchmarks/guard_latency.py --checks 20000 --repeats 2 --json > "$out/latency_${tree}_$i.json"
    else
      PYTHONPATH=$old .venv/bin/python benchmarks/guard_latency.py --checks 20000 --repeats 2 --json > "$out/latency_${tree}_$i.json"
    fi
    stamp "end guard_latency $tree $i"
  done
done
stamp "start guard_tail"
.venv/bin/python benchmarks/guard_tail.py --checks 20000 --observes 3000 --repeats 1 --build old=$old --json > "$out/tail.json"
stamp "end guard_tail"
