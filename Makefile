# The two quick-start commands (run as root on a fresh Debian 12 machine): `make lab`, `make test`.
# Each does its own set-up through vagrant/provision.sh, which is idempotent and quick when there is nothing to do.
PY := .venv/bin/python
MRCLAB := .venv/bin/mrclab
LAB ?= scenarios/quickstart.yaml

.PHONY: setup lab test unit integration bench clean check

setup:
	@bash vagrant/provision.sh

lab: setup
	$(MRCLAB) check
	$(MRCLAB) run $(LAB)

test: setup
	$(PY) -m pytest -q tests

unit: setup
	$(PY) -m pytest -q tests/unit

integration: setup
	$(PY) -m pytest -q tests/integration

check: setup
	$(MRCLAB) check

bench: setup
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	-$(MRCLAB) clean
