"""JUnit XML for CI: a command's result as one ``<testsuite>`` of ``<testcase>`` elements.

The files follow the Jenkins/Ant JUnit schema (the one CI servers read: ``testsuites`` ⊃
``testsuite`` with ``properties`` ⊃ ``property``, ``testcase`` ⊃ ``failure`` and ``system-out``).
What a test case is, per certificate kind:

- black-box (fixed-N, sequential, rejudged): one case per cell of the family, stage 1 first,
  named by the cell's parameters; a cell whose decision is not PASS is a ``<failure>``;
- shield: one case, the certified bound V̄_T(s0) against ε (FAIL is a failure; BOUND, without ε,
  passes and says that nothing is claimed);
- BNN: one case per ε attempt; UNKNOWN is a failure with its reason;
- verify: one case per check; a failed check is a failure with both values.

Every case's ``system-out`` lists its numbers as ``key = value`` lines (episodes N, failures,
upper bound, decision, …), so a CI page shows them without opening the certificate.

>>> xml = suite_xml("demo", [Case("cell a", "safecert.blackbox", {"decision": "PASS"})])
>>> b'tests="1"' in xml and b'failures="0"' in xml
True
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One test case: its name, its class name (the command), its numbers and, when it failed,
    the failure's message and type."""

    name: str
    classname: str
    values: Mapping[str, Any] = field(default_factory=dict)
    failure: str | None = None
    failure_type: str = "FAIL"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def suite_xml(
    name: str, cases: Sequence[Case], properties: Mapping[str, Any] | None = None
) -> bytes:
    """The XML document (UTF-8 bytes): ``<testsuites>`` holding one ``<testsuite name=…>``."""
    failures = sum(c.failure is not None for c in cases)
    root = ET.Element(
        "testsuites", name="safecert", tests=str(len(cases)), failures=str(failures), errors="0"
    )
    suite = ET.SubElement(
        root,
        "testsuite",
        name=name,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    if properties:
        props = ET.SubElement(suite, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=str(key), value=_text(value))
    for case in cases:
        element = ET.SubElement(suite, "testcase", name=case.name, classname=case.classname)
        if case.failure is not None:
            failure = ET.SubElement(
                element, "failure", message=case.failure, type=case.failure_type
            )
            failure.text = case.failure
        if case.values:
            out = ET.SubElement(element, "system-out")
            out.text = "".join(f"{k} = {_text(v)}\n" for k, v in case.values.items())
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(
    path: Path, name: str, cases: Sequence[Case], properties: Mapping[str, Any] | None = None
) -> Path:
    """Write :func:`suite_xml` to ``path`` (its folder created); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(suite_xml(name, cases, properties))
    return path


def certificate_cases(cert: Any, command: str) -> list[Case]:
    """The test cases of a certificate of any kind (module docstring)."""
    kind = cert.kind
    if kind in ("blackbox", "sequential"):
        return blackbox_cases(cert, command)
    if kind == "shield":
        return [shield_case(cert, command)]
    if kind == "bnn":
        return bnn_cases(cert, command)
    raise ValueError(f"no JUnit cases for a {kind} certificate")


def certificate_properties(cert: Any) -> dict[str, Any]:
    """The suite's properties: the certificate's kind and verdict, and its headline numbers."""
    res = cert.result
    props: dict[str, Any] = {"kind": cert.kind, "verdict": cert.verdict}
    for key in ("p_star", "confidence", "family_size", "budget", "bound", "epsilon", "horizon"):
        value = getattr(res, key, None)
        if value is not None and not hasattr(value, "model_dump"):
            props[key] = value
    return props


def blackbox_cases(cert: Any, command: str) -> list[Case]:
    """Stage 1, then one case per grid cell; a decision other than PASS is a failure."""
    from safecert.blackbox.grid import cell_label

    res = cert.result
    classname = f"safecert.{command}"
    cases = []
    for title, cell in [("stage 1 (nominal)", res.stage1)] + [
        (cell_label(c.params), c) for c in res.cells
    ]:
        values = {
            "params": cell_label(cell.params),
            "episodes": cell.episodes,
            "failures": cell.failures,
            "task_failures": cell.task_failures,
            "safety_failures": cell.safety_failures,
            "upper_bound": cell.upper_bound,
            "p_star": res.p_star,
            "decision": cell.decision,
        }
        failure = None
        if cell.decision != "PASS":
            failure = (
                f"{cell.decision}: {cell.failures} failures in {cell.episodes} episodes, "
                f"upper bound {cell.upper_bound:.6g} vs p* = {res.p_star}"
            )
        cases.append(Case(title, classname, values, failure, str(cell.decision)))
    return cases


def shield_case(cert: Any, command: str) -> Case:
    """The certified bound against ε: FAIL fails; PASS and BOUND (nothing claimed) pass."""
    res = cert.result
    values = {
        "bound": res.bound,
        "epsilon": "none" if res.epsilon is None else res.epsilon,
        "horizon": res.horizon,
        "delta": res.delta,
        "forbidden_fraction": res.forbidden_fraction,
        "verdict": cert.verdict,
    }
    name = "bound V_T(s0) <= epsilon" if res.epsilon is not None else "bound V_T(s0)"
    failure = None
    if cert.verdict == "FAIL":
        failure = f"FAIL: certified bound {res.bound:.6g} > epsilon {res.epsilon}"
    return Case(name, f"safecert.{command}", values, failure, "FAIL")


def bnn_cases(cert: Any, command: str) -> list[Case]:
    """One case per ε attempt, in the order tried; UNKNOWN is a failure with its reason."""
    cases = []
    for row in cert.result.search:
        shown = f"{row.epsilon:g}sigma" if row.unit == "sigma" else f"{row.epsilon:g}"
        values = {
            "epsilon": shown,
            "verdict": row.verdict,
            "reason": row.reason,
            "iterations": row.iterations,
            "machine_dependent": row.machine_dependent,
        }
        failure = None if row.verdict == "SAFE" else f"{row.verdict}: {row.reason}"
        cases.append(
            Case(f"epsilon = {shown}", f"safecert.{command}", values, failure, str(row.verdict))
        )
    return cases


def verification_cases(report: Any) -> list[Case]:
    """One case per check of a verification report; a failed check is a failure."""
    return [
        Case(
            c.name,
            f"safecert.verify.{report.kind}",
            {"ok": c.ok, "detail": c.detail},
            None if c.ok else f"MISMATCH: {c.detail}",
            "MISMATCH",
        )
        for c in report.checks
    ]
