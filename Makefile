# Two commands on a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
OUT ?= runs/demo

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(OUT)
	$(VENV)/bin/safecert certify examples/demo.toml --out $(OUT) || test $$? -eq 1
	@echo "report: $(OUT)/report.html (verify: $(VENV)/bin/safecert verify $(OUT)/certificate.json)"

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2 --timeout 600

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --timeout 1800

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache
