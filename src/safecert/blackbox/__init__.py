"""CORE-RL black-box certification: oracles, envelope, rollouts, backends, certification.

A vendor policy is queried only through an :mod:`safecert.blackbox.oracles` oracle (a Python
callable, an executable speaking NDJSON, an HTTP endpoint, or an ONNX file); nothing else about the
policy is assumed. See ``docs/oracles-and-envs.md`` and ``docs/architecture.md``.
"""
