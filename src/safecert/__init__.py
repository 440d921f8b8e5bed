"""safecert: certify learned controllers before and during deployment.

Three engines over one statistics core:

* :mod:`safecert.blackbox` — statistical certification of opaque RL policies (CORE-RL);
* :mod:`safecert.shield` — certified runtime shields for tool-using agents, from logs;
* :mod:`safecert.bnn` — infinite-horizon safety of Bayesian neural-network policies.

Every engine writes a :class:`safecert.certificate.Certificate` that ``safecert verify`` re-checks.
The Python front door (:mod:`safecert.api`, re-exported here and imported on first use, so
``import safecert`` stays fast)::

    import safecert
    cert = safecert.certify_blackbox("run.toml", "runs/one")
    report = safecert.verify("runs/one/certificate.json")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "certify_blackbox",
    "certify_shield",
    "count_logs",
    "load_certificate",
    "plan_shield",
    "synthesize_shield",
    "verify",
    "verify_bnn",
]

if TYPE_CHECKING:
    from safecert.api import (
        certify_blackbox,
        certify_shield,
        count_logs,
        load_certificate,
        plan_shield,
        synthesize_shield,
        verify,
        verify_bnn,
    )


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from safecert import api

        return getattr(api, name)
    raise AttributeError(f"module 'safecert' has no attribute {name!r}")
