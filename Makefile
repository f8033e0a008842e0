# The two quick-start commands (run as root on a fresh Debian 12 machine): `make lab`, `make test`.
# Each does its own set-up through vagrant/provision.sh, which is idempotent and quick when there is nothing to do.
# unit, lint and typecheck need only .venv (any user); lab, test and integration provision the machine (root).
PY := .venv/bin/python
MRCLAB := .venv/bin/mrclab
LAB ?= scenarios/quickstart.yaml

.PHONY: proto schema build paper paper-quick setup venv lab test unit lint typecheck integration bench clean check fresh-test screenshots vm-setup vm-build vm-test vagrant-setup vagrant-box vagrant-test

setup:
	@bash vagrant/provision.sh

venv:
	@bash vagrant/provision.sh --venv-only

lab: setup
	$(MRCLAB) check
	$(MRCLAB) run $(LAB)

# The transport and the agent run on both builds (mrclab/build.py): compiled (what setup builds), then pure.
BOTH_BUILDS := tests/unit/test_transport_*.py tests/unit/test_agent*.py tests/unit/test_ecmp_agent.py \
	tests/unit/test_scapy_layer.py tests/unit/test_build.py tests/unit/test_sim_engine.py \
	tests/integration/test_agent_fabric.py

test: setup lint typecheck
	$(PY) -c 'from mrclab.build import running; print("transport build:", running())'
	$(PY) -m pytest -q tests
	MRCLAB_PURE=1 $(PY) -m pytest -q $(BOTH_BUILDS)

# the Chakra trace schema's Python classes (committed; tests/unit/test_trace_proto.py fails when they are stale)
proto:
	protoc --proto_path=. --python_out=. --pyi_out=. mrclab/trace/et_def.proto

# the transport compiled in place, when missing or older than its sources (setup does it too)
build: setup

unit: venv
	$(PY) -m pytest -q tests/unit

# the JSON Schemas editors read (the files' first lines name them), made from mrclab/spec/keys.py; a test checks
# they are current
schema: venv
	$(MRCLAB) schema scenario > scenarios/scenario.schema.json
	$(MRCLAB) schema topology > topologies/topology.schema.json

# pyproject.toml says what is checked and how
lint: venv
	$(PY) -m ruff check

typecheck: venv
	$(PY) -m mypy

integration: setup
	$(PY) -m pytest -q tests/integration

# the paper suite: every experiment of ../shared/PAPER.md the lab holds (docs/paper.md), not in `make test`
paper: setup
	$(MRCLAB) paper

paper-quick: setup
	$(MRCLAB) paper --quick

check: setup
	$(MRCLAB) check

bench: setup
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	-$(MRCLAB) clean

# Not in CI (minutes): check, lab and test on a new Debian 12 root in namespaces of its own.
fresh-test:
	bash vagrant/fresh-test.sh

# Not in CI: headless Chromium pictures of a run's report page (RUN=results/<run>), for a human to look at.
screenshots:
	bash benchmarks/screenshots.sh $(RUN)

# The lab VM under QEMU (not in CI: minutes of CPU). vm-test builds the image unless .vm/disk.img
# exists (VM_REBUILD=1 rebuilds), boots it, checks it, runs the smoke scenario in it, shuts it down.
vm-setup:
	@bash vagrant/provision.sh --vm

vm-build: vm-setup
	$(MRCLAB) vm build

vm-test: vm-setup
	@if [ ! -f .vm/disk.img ] || [ -n "$(VM_REBUILD)" ]; then $(MRCLAB) vm build; fi
	MRCLAB_VM_TEST=1 $(PY) -m pytest -q -s tests/vm

# The lab VM as a Vagrant box under libvirt (not in CI: many minutes of CPU). vagrant-box makes
# .vm/mrclab-bookworm.box from the image; vagrant-test makes it unless it exists (VM_REBUILD=1 rebuilds
# both), then runs vagrant up, make lab, --target vagrant, provision, halt and destroy with libvirtd
# in a network namespace of its own, on a management network that forwards nowhere.
vagrant-setup:
	@bash vagrant/provision.sh --vagrant

vagrant-box: vagrant-setup
	@if [ ! -f .vm/disk.img ] || [ -n "$(VM_REBUILD)" ]; then $(MRCLAB) vm build; fi
	$(MRCLAB) vm box

vagrant-test: vagrant-setup
	@if [ ! -f .vm/mrclab-bookworm.box ] || [ -n "$(VM_REBUILD)" ]; then $(MAKE) vagrant-box; fi
	MRCLAB_VAGRANT_TEST=1 $(PY) -m pytest -q -s tests/vagrant
