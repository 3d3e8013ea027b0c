# Mirage: the two commands of the README are `make demo` and `make test`.
# Both create .venv and install what they need; `make test` also installs and starts the
# real Slurm test cluster (Debian packages; needs root) and stops it afterwards.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)
# Unit tests in parallel; real-Slurm tests in their own run, sharing one cluster start.
PYTEST_WORKERS ?= 2

.PHONY: demo test venv lint unit slurm-tests slurm-slow slurm-up slurm-down fidelity fidelity-record clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	scripts/ensure-python.sh $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# The daemon on the simulated backend: 4 chains of 24 h segments on a busy replay of the
# bundled ls6 slice (65 of the calibrated 79 nodes, ls6's per-user limit), a live status
# view, then the gap table against reactive submission of the same chains (~75 s).
demo: venv
	$(BIN)/mirage demo --trace traces/ls6-a100-slice.log.gz \
	  --profile models/ls6/profile.toml --nodes 65 --chains 4 --segments 3 \
	  --time-limit 24:00:00 --policy shipped

lint: venv
	$(BIN)/ruff check mirage tests scripts experiments
	$(BIN)/ruff format --check mirage tests scripts experiments
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest -m "not slurm" -n $(PYTEST_WORKERS) -q

slurm-up:
	scripts/slurm-testbed/start.sh

slurm-down:
	scripts/slurm-testbed/stop.sh

# The cluster is stopped whatever the outcome; the exit status is pytest's. The fidelity
# check (tests/slurm/test_fidelity.py: one live run of the suite's smallest workload against
# its recorded fixtures and the simulator, ~3 min, the whole cluster to itself) runs in the same session on the same cluster start, in module order (after the
# cluster and daemon tests, before test_unreachable, marked slurm_last; it drains the queue first).
slurm-tests: venv slurm-up
	MIRAGE_REQUIRE_SLURM=1 MIRAGE_FIDELITY=1 $(BIN)/pytest -m "slurm and not slurm_slow" -q; rc=$$?; \
	  scripts/slurm-testbed/stop.sh; exit $$rc

# The slow live runs `make test` leaves out (marked slurm_slow: the daemon's end-to-end
# chain test under load, kill -9 and the controller outage with [slurm] backend = "pyslurm",
# the handoff at three leads, and the fault suite, tests/slurm/test_fault_suite.py, whose
# report goes to $MIRAGE_FAULT_REPORT when set; ~22 min), pyslurm built first.
slurm-slow: venv slurm-up
	scripts/build-pyslurm.sh $(VENV) && MIRAGE_REQUIRE_SLURM=1 MIRAGE_REQUIRE_PYSLURM=1 \
	  $(BIN)/pytest -p no:xdist -m slurm_slow -q; rc=$$?; scripts/slurm-testbed/stop.sh; exit $$rc

# Lint and unit tests run (niced) beside the real-Slurm tests, which mostly wait on real
# time: about 5 minutes less than one after the other (scripts/run-tests.sh).
test: venv
	BIN=$(BIN) MAKE=$(MAKE) scripts/run-tests.sh

# Only the fidelity check against real Slurm (one live run of the suite's smallest workload
# against its recorded fixture runs and the simulator's replay, ~3 min).
fidelity: venv slurm-up
	MIRAGE_REQUIRE_SLURM=1 MIRAGE_FIDELITY=1 $(BIN)/pytest -p no:xdist -s -m slurm \
	  tests/slurm/test_fidelity.py; rc=$$?; scripts/slurm-testbed/stop.sh; exit $$rc

# Re-record the fidelity suite's fixtures on the real cluster (mirage/sim/record.py): every
# tests/data/fidelity/<name>/workload.json twice, as run-1/ and run-2/ (run.json, sacct.txt,
# sshare.txt), the queue drained before each run; then commit the run-* directories.
fidelity-record: venv slurm-up
	rc=0; for w in tests/data/fidelity/*/workload.json; do \
	  $(BIN)/python -m mirage.sim.record "$$w" --out "$$(dirname "$$w")" --runs 2 || { rc=$$?; break; }; \
	done; scripts/slurm-testbed/stop.sh; exit $$rc

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
