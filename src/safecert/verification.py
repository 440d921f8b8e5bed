"""The verification report: what ``safecert verify`` found, check by check.

A :class:`VerificationReport` is a list of :class:`Check` rows, each a recomputed quantity, whether
it matched what the certificate claims, and the two values when it did not. It knows nothing of
certificate kinds (:mod:`safecert.certificate`) or how each engine re-derives its claim
(:mod:`safecert.audit`), so :mod:`safecert.signing` can report signature checks with it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from safecert.canonical import to_jsonable

__all__ = ["Check", "VerificationReport", "short_repr"]


@dataclass(frozen=True)
class Check:
    """One recomputed quantity: what was checked, whether it matched, and how."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class VerificationReport:
    """What ``safecert verify`` found; ``ok`` only when every check matched (and there was one).
    ``verdict``: the verdict the certificate states (None when its signature failed and nothing
    else was read). It is vouched for only when ``ok``: a forged certificate states what it
    likes, so callers report it as *claimed* unless ``ok``. ``recomputed_verdict``: the verdict
    the engine's checker re-derived from the parameters and evidence (None when it did not get
    that far, e.g. a digest failed first)."""

    kind: str
    checks: list[Check] = field(default_factory=list)
    verdict: str | None = None
    recomputed_verdict: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append(Check(name, bool(ok), detail))

    def verdict_check(self, recomputed: str, claimed: str) -> bool:
        """The engine's re-derived verdict against the claimed one (kept as
        ``recomputed_verdict``, so a report states both even when they differ)."""
        self.recomputed_verdict = recomputed
        return self.equal("verdict", recomputed, claimed)

    def equal(self, name: str, recomputed: Any, claimed: Any) -> bool:
        """Add a check that ``recomputed == claimed``; the detail shows both values."""
        ok = _same(recomputed, claimed)
        self.add(
            name,
            ok,
            f"{short_repr(recomputed)}"
            if ok
            else f"recomputed {short_repr(recomputed)}, certificate {short_repr(claimed)}",
        )
        return ok

    def compare_documents(self, name: str, recomputed: Any, claimed: Any, limit: int = 20) -> bool:
        """One failing check per differing path of two JSON documents (at most ``limit``), or
        one passing check when they are equal."""
        fresh, given = to_jsonable(recomputed), to_jsonable(claimed)
        diffs = list(_diff(fresh, given, name))
        if not diffs:
            self.add(name, True, "equal to the recomputed value")
            return True
        for path, mine, theirs in diffs[:limit]:
            self.add(
                path, False, f"recomputed {short_repr(mine)}, certificate {short_repr(theirs)}"
            )
        if len(diffs) > limit:
            self.add(name, False, f"{len(diffs) - limit} more differences")
        return False


_ABSENT = object()


def _same(a: Any, b: Any) -> bool:
    return not list(_diff(to_jsonable(a), to_jsonable(b), ""))


def _diff(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """Paths where two JSON values differ. Floats must be equal to the last bit: the checker runs
    the same deterministic code on the same evidence, so any difference is a change."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _diff(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a is _ABSENT or b is _ABSENT:
        yield path, "(absent)" if a is _ABSENT else a, "(absent)" if b is _ABSENT else b
    elif type(a) is not type(b) and not (
        isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)
    ):
        yield path, a, b
    elif a != b:
        yield path, a, b


def short_repr(value: Any) -> str:
    """``repr`` cut to 60 characters, for one-line messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
