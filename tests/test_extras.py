"""Optional dependencies (safecert.extras): the table agrees with pyproject.toml and with what the
code imports, and a missing package is one line naming its extra, exit 2, nothing written.

The CLI tests run the real command in a subprocess whose imports of the named packages fail as on
a base install: a ``sitecustomize`` on PYTHONPATH puts a finder in front of ``sys.meta_path``
(inherited by every child process the command starts).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from safecert import extras
from safecert.extras import (
    COMMANDS,
    EXTRAS,
    PACKAGES,
    POLICY_SCHEMES,
    MissingExtraError,
    missing_extra,
    require_extra,
)
from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _expand(extra: str) -> set[str]:
    """The distributions ``safecert[extra]`` installs, following ``safecert[...]`` references."""
    names: set[str] = set()
    for req in PYPROJECT["optional-dependencies"][extra]:
        if _name(req) == "safecert":
            inner = re.search(r"\[(.*)\]", req)
            assert inner, req
            for sub in inner.group(1).split(","):
                names |= _expand(sub.strip())
        else:
            names.add(_name(req))
    return names


def _dists(modules: tuple[str, ...] | list[str]) -> set[str]:
    return {_name(PACKAGES[m]) for m in modules}


# --- the table ------------------------------------------------------------------------------


def test_extras_table_is_pyproject():
    declared = PYPROJECT["optional-dependencies"]
    assert set(declared) == set(EXTRAS) | {"all", "dev"}
    for extra, modules in EXTRAS.items():
        assert _dists(modules) == _expand(extra), extra
    assert _expand("all") == _dists([m for modules in EXTRAS.values() for m in modules])
    assert set(COMMANDS.values()) <= set(EXTRAS)
    assert set(POLICY_SCHEMES.values()) <= set(EXTRAS)


def test_torch_is_pinned_exactly():
    torch = [
        req
        for reqs in PYPROJECT["optional-dependencies"].values()
        for req in reqs
        if _name(req) == "torch"
    ]
    assert torch and set(torch) == {"torch==2.13.0"}


def _local_modules() -> set[str]:
    """Names a test or example imports from the repository itself (tests/, examples/, ...)."""
    names = {"safecert", "tests", "benchmarks"}
    for path in REPO.rglob("*.py"):
        if ".venv" not in path.parts:
            names.add(path.stem)
            names.update(path.relative_to(REPO).parts[:-1])
    return names


def _imports(folder: Path) -> dict[str, str]:
    """Top-level module → one file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], str(path.relative_to(REPO)))
    return found


def _third_party(found: dict[str, str]) -> dict[str, str]:
    local = _local_modules()
    return {
        m: f
        for m, f in found.items()
        if m not in sys.stdlib_module_names and m != "__future__" and m not in local
    }


def test_every_import_of_the_code_is_declared():
    base = {_name(req) for req in PYPROJECT["dependencies"]}
    base_modules = {"numpy", "scipy", "pydantic", "typer", "rich", "cryptography", "orjson"}
    assert {_name(m) for m in base_modules} == base
    undeclared = {
        m: f
        for m, f in _third_party(_imports(REPO / "src" / "safecert")).items()
        if m not in base_modules and m not in PACKAGES
    }
    assert not undeclared, (
        f"imported by src/ but in no extra (safecert.extras.PACKAGES): {undeclared}"
    )


def test_every_import_of_the_tests_is_declared():
    declared = {_name(req) for req in PYPROJECT["dependencies"]}
    for extra in PYPROJECT["optional-dependencies"]:
        declared |= {_name(req) for req in PYPROJECT["optional-dependencies"][extra]}
    provided = importlib.metadata.packages_distributions()
    undeclared = {}
    for module, path in _third_party(_imports(REPO / "tests")).items():
        dists = {_name(PACKAGES[module])} if module in PACKAGES else set()
        dists |= {_name(d) for d in provided.get(module, [module])}
        if not dists & declared:
            undeclared[module] = path
    assert not undeclared, f"imported by tests/ but not declared in pyproject.toml: {undeclared}"


# --- require_extra and missing_extra, in this process -----------------------------------------


def test_require_extra_names_package_extra_and_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "highspy", None)  # as if not installed
    assert not extras.installed("highspy")
    with pytest.raises(MissingExtraError) as info:
        require_extra("bnn")
    text = str(info.value)
    assert "\n" not in text
    assert "highspy is not installed" in text
    assert "pip install 'safecert[bnn]'" in text
    assert info.value.module == "highspy" and info.value.extra == "bnn"


def test_message_names_the_distribution_when_it_differs(monkeypatch):
    monkeypatch.setattr(extras, "installed", lambda module: module != "agents")
    with pytest.raises(
        MissingExtraError, match=r"^openai-agents \(import agents\) is not installed"
    ):
        require_extra("agents")


def test_require_extra_is_silent_when_installed():
    for extra in EXTRAS:
        if not extras.missing(extra):
            require_extra(extra)
    with pytest.raises(ValueError, match="unknown extra"):
        require_extra("nope")


def _raised(code: str, filename: str) -> ModuleNotFoundError:
    try:
        exec(compile(code, filename, "exec"), {})
    except ModuleNotFoundError as exc:
        return exc
    raise AssertionError(f"{code!r} imported")


def test_safecert_importing_a_missing_optional_package_is_labelled(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    inside = str(Path(extras.__file__).parent / "blackbox" / "somewhere.py")
    error = missing_extra(_raised("import gymnasium", inside))
    assert error is not None and error.extra == "blackbox"
    assert "pip install 'safecert[blackbox]'" in str(error)
    error = missing_extra(_raised("import gymnasium", str(Path(extras.__file__).parent / "x.py")))
    assert error is not None and error.extra == "blackbox"  # the first extra that provides it


def test_a_real_safecert_module_is_labelled(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    monkeypatch.delitem(sys.modules, "safecert.blackbox.ranges", raising=False)
    with pytest.raises(ModuleNotFoundError) as info:
        import safecert.blackbox.ranges  # noqa: F401
    error = missing_extra(info.value)
    assert error is not None and error.extra == "blackbox"


def test_others_are_not_mislabelled(monkeypatch, tmp_path):
    inside = str(Path(extras.__file__).parent / "blackbox" / "somewhere.py")
    # an unknown module, even when safecert imports it
    assert missing_extra(_raised("import no_such_module_xyz", inside)) is None
    # a missing submodule of an installed optional package: a version problem, not an extra
    assert missing_extra(_raised("import numpy.no_such_module_xyz", inside)) is None
    if extras.installed("gymnasium"):
        assert missing_extra(_raised("import gymnasium.no_such_module_xyz", inside)) is None
    # user code: a policy module importing a known package, imported by safecert's own loader
    monkeypatch.setitem(sys.modules, "torch", None)
    (tmp_path / "user_policy_xyz.py").write_text("import torch\n\ndef act(obs):\n    return obs\n")
    from safecert.usercode import import_from

    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import_from("user_policy_xyz:act", tmp_path, field="policy")
    except ModuleNotFoundError as exc:
        assert missing_extra(exc) is None
    except Exception as exc:  # the loader may wrap it in its own one-line error: fine as well
        assert "safecert[" not in str(exc)
    # a test's or a script's own import, outside safecert
    assert missing_extra(_raised("import torch", str(tmp_path / "script.py"))) is None


# --- the command, as on a base install --------------------------------------------------------

BLOCKER = textwrap.dedent(
    """
    import os
    import sys

    _BLOCKED = set(filter(None, os.environ.get("SAFECERT_TEST_BLOCK", "").split(",")))


    class _NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in _BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, _NotInstalled())
    """
)


def _run_blocked(tmp_path: Path, blocked: list[str], *args: str, cwd: Path = REPO):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["SAFECERT_TEST_BLOCK"] = ",".join(blocked)
    return subprocess.run(
        [sys.executable, "-m", "safecert.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def _assert_one_line(proc: subprocess.CompletedProcess, dist: str, extra: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"safecert: error: {dist}")
    assert f"the {extra} extra" in lines[0]
    assert f"pip install 'safecert[{extra}]'" in lines[0]


EX = REPO / "examples"
CASES = {
    "certify": (
        ["gymnasium"],
        "gymnasium",
        "blackbox",
        ["certify", str(EX / "demo.toml"), "--out", "{out}"],
    ),
    "certify-onnxruntime": (
        ["onnxruntime"],
        "onnxruntime",
        "blackbox",
        ["certify", str(EX / "demo.toml"), "--out", "{out}"],
    ),
    "certify-sb3": (
        ["stable_baselines3"],
        "stable-baselines3",
        "sb3",
        ["certify", str(EX / "cartpole_sb3.toml"), "--out", "{out}"],
    ),
    "certify-ray": (
        ["ray"],
        "ray",
        "ray",
        ["certify", str(EX / "demo.toml"), "--out", "{out}", "--backend", "ray"],
    ),
    "shield-synthesize": (
        ["matplotlib"],
        "matplotlib",
        "shield",
        [
            "shield",
            "synthesize",
            "--model",
            str(EX / "shield" / "grid.toml"),
            "--logs",
            str(EX / "shield" / "grid_logs.jsonl"),
            "--epsilon",
            "0.2",
            "--out",
            "{out}",
        ],
    ),
    "shield-serve": (
        ["mcp", "mcp_types"],
        "mcp",
        "agents",
        [
            "shield",
            "serve",
            "--certificate",
            str(EX / "payments" / "cert" / "certificate.json"),
            "--upstream",
            "python tools_server.py",
            "--abstraction",
            "phi:phi",
            "--steps-log",
            "{out}/steps.jsonl",
        ],
    ),
    "bnn-verify": (
        ["highspy"],
        "highspy",
        "bnn",
        ["bnn", "verify", "--benchmark", "lds", "--out", "{out}"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_missing_extra_is_one_line_and_writes_nothing(tmp_path, case):
    blocked, dist, extra, args = CASES[case]
    out = tmp_path / "run"
    proc = _run_blocked(tmp_path, blocked, *[a.replace("{out}", str(out)) for a in args])
    _assert_one_line(proc, dist, extra)
    assert not out.exists()


def test_a_lazy_import_in_verify_is_one_line(tmp_path):
    """verify has no extra of its own (what it needs depends on the certificate's kind): the
    import fails inside safecert, and the CLI maps it to the same line."""
    (tmp_path / "vendors").mkdir()
    shutil.copy(EX / "vendors" / "cartpole_policies.py", tmp_path / "vendors")
    config = tmp_path / "cartpole.toml"
    text = (EX / "cartpole_expressions.toml").read_text(encoding="utf-8")
    config.write_text(text.replace("episodes = 100", "episodes = 4"), encoding="utf-8")
    run = tmp_path / "run"
    proc = _run_blocked(tmp_path, [], "certify", str(config), "--out", str(run), "--workers", "1")
    assert proc.returncode in (0, 1) and (run / "certificate.json").exists(), proc.stderr
    proc = _run_blocked(tmp_path, ["gymnasium"], "verify", str(run / "certificate.json"))
    _assert_one_line(proc, "gymnasium", "blackbox")
    # a base dependency is not an extra's: a broken install stays a traceback
    proc = _run_blocked(tmp_path, ["scipy"], "verify", str(run / "certificate.json"))
    assert "safecert[" not in proc.stderr


def test_base_commands_run_without_any_extra(tmp_path):
    everything = sorted(PACKAGES)
    proc = _run_blocked(tmp_path, everything, "plan", "--p-star", "0.05", "--confidence", "0.9")
    assert proc.returncode == 0, proc.stderr
    proc = _run_blocked(tmp_path, everything, "bound", "--failures", "1", "--episodes", "100")
    assert proc.returncode == 0, proc.stderr
    proc = _run_blocked(tmp_path, everything, "keygen", "--out", str(tmp_path / "keys"))
    assert proc.returncode == 0, proc.stderr
    model, logs = EX / "sandbox" / "model.toml", EX / "sandbox" / "explore.jsonl"
    proc = _run_blocked(
        tmp_path, everything, "shield", "diagnose", "--model", str(model), "--logs", str(logs)
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    proc = _run_blocked(tmp_path, everything, "certify", "--help")
    assert proc.returncode == 0 and "Usage" in proc.stdout


@pytest.mark.slow
def test_real_base_install(tmp_path):
    """``pip install -e .`` with no extra, in a fresh venv (pip's configured index only)."""
    tree = tmp_path / "safecert"
    tree.mkdir()
    shutil.copy(REPO / "pyproject.toml", tree)
    shutil.copy(REPO / "README.md", tree)
    shutil.copytree(
        REPO / "src", tree / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "-e", str(tree)], check=True, timeout=1200
    )
    safecert = venv / "bin" / "safecert"
    ok = subprocess.run([str(safecert), "plan", "--p-star", "0.05"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    out = tmp_path / "grid"
    proc = subprocess.run(
        [
            str(safecert),
            "shield",
            "synthesize",
            "--model",
            str(EX / "shield" / "grid.toml"),
            "--logs",
            str(EX / "shield" / "grid_logs.jsonl"),
            "--epsilon",
            "0.2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    _assert_one_line(proc, "matplotlib", "shield")
    assert not out.exists()
    proc = subprocess.run(
        [str(safecert), "certify", str(EX / "demo.toml"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    _assert_one_line(proc, "gymnasium", "blackbox")
    assert not out.exists()
