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
	$(VENV)/bin/safecert plan --p-star 0.05 --confidence 0.9 --failures 0,1,2,3,5,10,20,50,100
	$(VENV)/bin/safecert bound --failures 81 --episodes 10000 --confidence 0.9 --family-size 9

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2 --timeout 600

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --timeout 1800

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache
