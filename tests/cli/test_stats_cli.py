from __future__ import annotations

from tests.stats.test_planning import TABLE_68


def test_plan_reproduces_table_68(cli):
    res = cli(
        "plan",
        "--p-star",
        "0.05",
        "--confidence",
        "0.9",
        "--failures",
        "0,1,2,3,5,10,20,50,100",
        "--json",
    )
    assert res.code == 0, res.stderr
    data = res.json()
    assert set(data) == {"p_star", "confidence", "family_size", "plans"}
    got = {p["failures"]: (p["episodes"], round(p["upper_bound"], 5)) for p in data["plans"]}
    assert got == TABLE_68


def test_bound_json_and_table(cli):
    res = cli(
        "bound",
        "--failures",
        "460",
        "--episodes",
        "10000",
        "--confidence",
        "0.9",
        "--family-size",
        "9",
        "--json",
    )
    assert res.code == 0
    data = res.json()
    assert set(data) == {
        "failures",
        "episodes",
        "confidence",
        "family_size",
        "rate",
        "lower_bound",
        "upper_bound",
    }
    assert round(data["upper_bound"], 4) == 0.0510
    assert data["lower_bound"] < data["rate"] < data["upper_bound"]
    human = cli("bound", "--failures", "1", "--episodes", "45")
    assert human.code == 0 and "upper_bound" in human.stdout


def test_version(cli):
    res = cli("--version")
    assert res.code == 0 and res.stdout.startswith("safecert ")


def test_the_installed_command_smoke():
    """A few runs of the real command in its own process (the rest run in-process)."""
    from tests.conftest import run_cli

    assert run_cli("--version", in_subprocess=True).stdout.startswith("safecert ")
    bad = run_cli("bound", "--failures", "5", "--episodes", "3", in_subprocess=True)
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "Traceback" not in bad.stderr


def _one_line_error(res, needle):
    assert res.code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert needle in lines[0]


def test_bad_input_one_line(cli, tmp_path):
    _one_line_error(cli("bound", "--failures", "5", "--episodes", "3"), "--failures")
    _one_line_error(
        cli("bound", "--failures", "1", "--episodes", "3", "--confidence", "1.5"), "--confidence"
    )
    _one_line_error(cli("plan", "--p-star", "0.05", "--failures", "1,x"), "--failures")
    _one_line_error(cli("bound", "--failures", "1"), "--episodes")
    bad = tmp_path / "cert.json"
    bad.write_text("{not json")
    _one_line_error(cli("verify", str(bad)), "certificate")
    bad.write_text('{"kind": "spaceship"}')
    _one_line_error(cli("verify", str(bad)), "certificate")
    _one_line_error(cli("verify", str(tmp_path / "missing.json")), "certificate")


def test_bound_refuses_an_endless_size(cli):
    """N = 10^18 with k = N/2 used to sum tails without end; now one line above the limit."""
    res = cli("bound", "--failures", str(5 * 10**17), "--episodes", str(10**18))
    assert res.code == 2 and "episodes" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
