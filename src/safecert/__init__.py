"""safecert: certify learned controllers before and during deployment.

Three engines over one statistics core:

* :mod:`safecert.blackbox` — statistical certification of opaque RL policies (CORE-RL);
* :mod:`safecert.shield` — certified runtime shields for tool-using agents, from logs;
* :mod:`safecert.bnn` — infinite-horizon safety of Bayesian neural-network policies.

Every engine writes a :class:`safecert.certificate.Certificate` that ``safecert verify`` re-checks.
"""

from __future__ import annotations

__version__ = "0.1.0"
