# Quanta: `make demo` and `make test` are the two commands a fresh machine needs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# CPU-only machines get the CPU build of torch (a GPU machine may pick its own CUDA build).
TORCH_PIN ?= torch==2.13.0
TORCH_INDEX ?=
# Syne Tune, the peer in bench/lcbench.py, without its own dependency list (see the `peers` extra).
SYNE_TUNE_PIN ?= syne-tune==0.16.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
DEB_PKGS := redis-server postgresql chromium
PYTEST_ARGS ?=

.PHONY: demo test test-unit chaos install dev system-deps lint bench peers-old clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(HAS_GPU),)
	$(PY) -m pip install -q $(TORCH_PIN) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
endif
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dev,sim,peers,integrations]"
	$(PY) -m pip install -q --no-deps $(SYNE_TUNE_PIN)
	touch $@

install: $(VENV)/.installed

dev: $(VENV)/.dev

# Services and a browser for the integration tests (the tests start their own instances on free ports).
system-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi; \
	fi

demo: install
	$(VENV)/bin/quanta run examples/mnist1d.yaml --devices auto --output demo-result.json; \
	  code=$$?; echo "quanta run exited with $$code (0 = target reached, 3 = budget spent)"; \
	  echo "result written to demo-result.json"; exit $$code

# ruff everywhere; mypy on quanta (the folder app/) and workers ([tool.mypy] in pyproject.toml: strict for quanta.search and
# quanta.executor.policy).
lint: dev
	$(VENV)/bin/ruff check app workers examples tests bench
	@mkdir -p $(VENV)/mypy-path && ln -sfn $(CURDIR)/app $(VENV)/mypy-path/quanta
	MYPYPATH=$(VENV)/mypy-path $(VENV)/bin/mypy -p quanta -p workers

# Two workers, a test file on one worker at a time (its module fixtures, such as a cluster, stay whole): many
# tests wait on trial processes, services or a browser, so the suite takes about 11 minutes instead of 18 on
# 2 cores. The slowest tests are listed at the end, for whoever trims it next.
test: dev system-deps lint
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=20 $(PYTEST_ARGS)

# The pure tests (no services, trial processes or training): the quick check while changing code.
test-unit: dev
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow" tests/unit

# The chaos and load suite's long form (make test runs a short one): 20 random faults during a distributed
# search, 60 s of 50 API clients and 20 event streams; figures in bench/results/reliability/ (docs/reliability.md).
chaos: dev system-deps
	QUANTA_CHAOS_FAULTS=20 QUANTA_CHAOS_TRIALS=10 QUANTA_LOAD_SECONDS=60 \
	  QUANTA_RELIABILITY_OUT=bench/results/reliability \
	  $(VENV)/bin/pytest -q -s -p no:cacheprovider tests/chaos

# The maintained benchmarks that need nothing outside the repository, on a quiet machine (about an hour,
# most of it the MNIST-1D race against Optuna and Ray Tune, which the `bench` extra installs). The others
# (LCBench against Syne Tune, the trace simulator, the longer race) read data from ../shared/data or take
# hours: docs/benchmarks.md gives each one's command.
bench: dev system-deps
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) bench/timeslice.py --steps 8000 --json bench/results/timeslice.json
	$(PY) bench/start_latency.py --repeats 7 --json bench/results/start_latency.json
	$(PY) bench/migration.py --json bench/results/migration.json
	$(PY) bench/load.py --seconds 30 --clients 50 --streams 20 --json bench/results/reliability/load.json
	$(PY) bench/search.py --systems default,fifo,optuna,optuna_hb,ray --seeds 14,15,16,17,18,19,20 \
	  --targets 0.85,0.92,0.95 --max-seconds 300 --json bench/results/search_mnist1d.json

# The LCBench peers that need an environment of their own (bench/peer_env.py): Syne Tune 0.14.2 (MOBSTER,
# Hyper-Tune, DyHPO; 0.16 dropped them) and DEHB 0.1.2, both pinning numpy < 1.27, at the exact versions in
# bench/peer_requirements.txt. About 2 minutes. Not part of `make test`: tests/bench/test_peer_env.py skips
# without it. bench/lcbench.py finds it here or at $QUANTA_PEER_VENV.
PEER_VENV ?= .venv-peers
peers-old:
	bash bench/peer_env.sh $(PEER_VENV)

clean:
	rm -rf $(VENV) .quanta quanta.db quanta.db-wal quanta.db-shm demo-result.json test-artifacts
