"""Data flows one way: config → engine → typed result → certificate → report, and the CLI only
parses and prints. Every ``import`` of a safecert module — at module level or inside a function —
must go to the same or a lower layer; an engine never imports ``report``, ``api`` or ``cli``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "safecert"

#: lowest first; a module belongs to the first layer whose prefix matches it (longest wins)
LAYERS: list[tuple[str, ...]] = [
    (
        "safecert.errors",
        "safecert.canonical",
        "safecert.document",
        "safecert.verification",
        "safecert.config",
        "safecert.expressions",
        "safecert.orphans",
        "safecert.procs",
        "safecert.supervisor",
        "safecert.isolation",
        "safecert.usercode",
        "safecert.extras",
        "safecert.events",
    ),
    ("safecert.stats",),
    ("safecert.signing",),
    # the certificate schema and the typed results it holds
    (
        "safecert.certificate",
        "safecert.blackbox.result",
        "safecert.shield.result",
        "safecert.bnn.result",
    ),
    ("safecert.audit",),
    ("safecert.blackbox", "safecert.shield", "safecert.bnn", "safecert.envs"),
    ("safecert.report",),
    ("safecert.api",),
    ("safecert.cli",),
]


def layer_of(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    assert level >= 0, f"{module} is in no layer: add it to LAYERS"
    return level


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every safecert import in the file, wherever it is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    here = module_name(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("safecert")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this package
                base = here.split(".")
                base = base[: len(base) - node.level + (path.name == "__init__.py")]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("safecert"):
                names = [f"{target}.{a.name}" for a in node.names]
                # ``from safecert.x import y`` may name a submodule y: judge the deeper one
                found += [(node.lineno, n if _is_module(n) else target) for n in names]
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def test_every_import_goes_down_or_sideways():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = module_name(path)
        if here == "safecert":  # the package re-exports the API lazily, by name
            continue
        mine = layer_of(here)
        for line, target in imports_of(path):
            if target == "safecert":
                continue
            if layer_of(target) > mine:
                upward.append(f"{path.relative_to(PACKAGE)}:{line} {here} -> {target}")
    assert not upward, "imports against the data flow:\n" + "\n".join(upward)


def test_no_engine_imports_the_report_layer():
    report = layer_of("safecert.report")
    for engine in ("blackbox", "shield", "bnn", "envs"):
        for path in (PACKAGE / engine).rglob("*.py"):
            for line, target in imports_of(path):
                assert layer_of(target) < report or target.startswith(f"safecert.{engine}"), (
                    f"{path}:{line} imports {target}"
                )


def test_the_checker_knows_a_violation_when_it_sees_one(tmp_path):
    """The test above can fail: an upward import is found, at module level and in a function."""
    fake = PACKAGE / "blackbox" / "_layering_probe.py"
    assert not fake.exists()
    fake.write_text("def f():\n    from safecert.report import write_run_report\n")
    try:
        found = [t for _, t in imports_of(fake)]
        assert found == ["safecert.report.write_run_report"] or found == ["safecert.report"]
        assert layer_of(found[0]) > layer_of(module_name(fake))
    finally:
        fake.unlink()


def test_the_bnn_config_models_import_nothing_that_reads_them():
    """``bnn.config`` (the models) sits below the system, the search and the learner that use
    it; the checks that need them live in ``bnn.setup`` (no cycle, one set of defaults)."""
    above = (
        "safecert.bnn.search",
        "safecert.bnn.system",
        "safecert.bnn.setup",
        "safecert.bnn.learner",
    )
    found = [t for _, t in imports_of(PACKAGE / "bnn" / "config.py") if t.startswith(above)]
    assert not found, found
    from safecert.bnn.config import LearnerConfig, LearnerSettings

    for name, field in LearnerConfig.model_fields.items():
        if hasattr(LearnerSettings, name):
            assert field.default == getattr(LearnerSettings, name), name
