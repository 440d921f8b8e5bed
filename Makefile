# Two commands on a fresh machine with Python 3.11: `make demo` and `make test`.
# Each installs what it needs into .venv (a stamp per set of extras, remade when pyproject.toml
# changes): the demo only the black-box engine's extra, the tests everything.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
DEMO_EXTRAS := blackbox
TEST_EXTRAS := all,dev
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
OUT ?= runs/demo

.PHONY: demo test test-all lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[$(TEST_EXTRAS)]'
	touch $@

demo: $(DEMO_STAMP)
	rm -rf $(OUT)
	$(VENV)/bin/safecert certify examples/demo.toml --out $(OUT) || test $$? -eq 1
	@echo "report: $(OUT)/report.html (verify: $(VENV)/bin/safecert verify $(OUT)/certificate.json)"

test: $(TEST_STAMP)
	$(PY) -m pytest -q -m "not slow" -n 3 --timeout 600

test-all: $(TEST_STAMP)
	$(PY) -m pytest -q -n 2 --timeout 1800

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache
