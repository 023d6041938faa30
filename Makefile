# The two entry points of the README. Both set up .venv first (fast when already done).
PY := .venv/bin/python
# the tests run single-threaded (tests/conftest.py): one worker per core
PYTEST_ARGS ?= -n 2

.PHONY: setup demo test bench clean

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) -m pyg_lie demo

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: setup
	$(PY) -m pyg_lie bench neighbors --threads 1

clean:
	rm -rf .venv .pytest_cache .hypothesis
