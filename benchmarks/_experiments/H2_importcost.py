"""Instructions of importing each module named on the command line, in order, after everything a
one-episode ``certify`` imports before them (issue 28.3, helper H2): one ``os.getppid()`` marker
between imports, for ``valgrind --tool=callgrind --dump-before=getppid``; dump k+1 is module k.

    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file=cg.%p \
        .venv/bin/python benchmarks/_experiments/H2_importcost.py PRELOAD,MODULES -- MOD1 MOD2 ...
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

gc.disable()  # as certify imports (safecert.cli.collector): no collection inside one import
split = sys.argv.index("--")
for name in ",".join(sys.argv[1:split]).split(","):
    if name:
        importlib.import_module(name)
for name in sys.argv[split + 1 :]:
    os.getppid()
    importlib.import_module(name)
os.getppid()
