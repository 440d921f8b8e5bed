"""Continual re-certification: the careless agent deployed behind the certified shield.

Runs N sessions of the same careless agent as ``generate.py`` (random calls, 1–6 of them) against
the real tool functions of ``tools_server.py``, each behind one guard session of the certified
shield (:func:`safecert.shield.adapters.guarded` — the session object ``safecert shield serve``
runs, with the same steps log). A blocked call is not executed and the agent tries its next one.
The steps log it writes is what a deployment's gateway writes with ``--steps-log``: append it to
the original logs and re-certify with anytime sets (docs/shield.md, "Continual re-certification")::

    python deploy.py --sessions 1000 --out deployed.jsonl
    cat steps.jsonl deployed.jsonl > grown.jsonl
    safecert shield certify --model cert/model.toml --logs grown.jsonl --shield cert/shield.json \\
        --anytime --epsilon 0.2 --out recert
    safecert verify recert/certificate.json

Seeded (``--seed``): the same sessions, session ids and log every time. Needs the agents extra
(the tools server imports ``mcp``). Run from this folder.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def deploy(sessions: int, out: Path, *, seed: int = 11, first: int = 0) -> Path:
    """Run ``sessions`` guarded sessions (ids ``deploy{first}…``), appending their steps to
    ``out``; returns ``out``."""
    sys.path.insert(0, str(HERE))
    import phi
    import tools_server as tools

    from safecert.shield.adapters import ShieldBlocked, guarded
    from safecert.shield.certified import load_certified_shield
    from safecert.shield.session import JsonlSink

    rng = random.Random(seed + first)
    tools._rng.seed(seed + first)
    shield = load_certified_shield(HERE / "cert" / "certificate.json")
    calls = {
        "lookup_invoice": tools.lookup_invoice,
        "request_approval": tools.request_approval,
        "pay": tools.pay,
    }
    sink = JsonlSink(Path(out))
    try:
        for k in range(first, first + sessions):
            g = guarded(calls, shield, phi.phi, action_map=phi.action, steps_log=sink)
            g.session.session_id = f"deploy{k}"
            invoice = f"INV-{rng.randrange(100):03d}"
            amount = tools.INVOICES[invoice]["amount"]
            for _ in range(rng.randint(1, 6)):
                name = rng.choices(list(calls), weights=[3, 3, 4])[0]
                args = {"invoice": invoice} | ({"amount": amount} if name == "pay" else {})
                try:
                    g.call(name, **args)
                except ShieldBlocked:
                    if g.session.ended is not None:  # the guard ended it (refusal streak, T)
                        break
                    continue  # not executed; the agent tries its next call
            if g.session.ended is None:
                g.halt()
    finally:
        sink.close()
    return Path(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("deployed.jsonl"))
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    print(f"wrote {deploy(args.sessions, args.out, seed=args.seed)}")


if __name__ == "__main__":
    main()
