# raywatch: `make run` (dashboard on the embedded default), `make demo` (the same, watching a
# Tune search that goes wrong on four simulated GPUs) and `make test` (the whole suite).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The node agent's own light venv: psutil and nvidia-ml-py, no Django or database drivers.
AGENT_VENV := .venv-agent
AGENT_STAMP := $(AGENT_VENV)/.installed-stamp
# The machine's pip config points at local mirrors that may be absent; hide that noise only.
PIP_QUIET := 2>&1 | { grep -v '^WARNING: Location' || true; }

# requirements/*.lock: the whole tree pinned, each file of each package by its hash.
# Installs take exactly that (pip --require-hashes --no-deps resolves nothing), as the
# images do (Dockerfile). dev.lock is the server's tree plus the test tools: server.lock
# is held to dev.lock's versions, so an image runs what the tests ran.
PIPTOOLS := /tmp/raywatch-piptools
LOCK := env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock" \
	$(PIPTOOLS)/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras \
	--index-url https://pypi.org/simple --no-emit-index-url --no-emit-find-links

.PHONY: install run demo screenshots agent agent-install lock test lint bench clean

$(STAMP): pyproject.toml requirements/dev.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing raywatch and its locked dependencies into $(VENV)/ …"
	$(BIN)/python -m pip install -q --require-hashes --no-deps -r requirements/dev.lock $(PIP_QUIET)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e . $(PIP_QUIET)
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python manage.py ensure_admin
	$(BIN)/python manage.py serve

# A local Ray cluster with four logical GPUs, raywatch watching it and a Tune search that
# goes wrong (README "Try it: make demo"; demo/). Ctrl-C stops all of it.
demo: $(STAMP)
	$(BIN)/python -m demo

# The pictures of docs/pages.md (docs/screenshots/): make demo, shown in Chromium, by a script.
screenshots: $(STAMP)
	$(BIN)/python -m demo.screenshots

$(AGENT_STAMP): requirements/agent.lock
	@test -x $(AGENT_VENV)/bin/python || $(PYTHON) -m venv $(AGENT_VENV)
	$(AGENT_VENV)/bin/python -m pip install -q --require-hashes --no-deps \
		-r requirements/agent.lock $(PIP_QUIET)
	@touch $(AGENT_STAMP)

agent-install: $(AGENT_STAMP)

# On every Ray node: RAYWATCH_URL=https://… RAYWATCH_AGENT_TOKEN=rwa_… make agent
# (docs/agents.md; the protocol: docs/agent-protocol.md).
agent: $(AGENT_STAMP)
	$(AGENT_VENV)/bin/python -m collectors.agent

# After a change to pyproject.toml's or agent-requirements.txt's pins: pip-tools in a
# throwaway venv, resolved against PyPI alone (whatever this machine's pip config says).
# A pin already in a lock stays unless its input moved it. pip-compile reads hashes from
# PyPI's JSON API; where that is blocked it downloads every file to hash it (slow).
# dev.lock's torch is the CPU build (torch==2.13.0+cpu), which only PyTorch's CPU index
# has; make install finds its wheel wherever pip is configured to look (PIP_FIND_LINKS,
# or PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu), checked by its hash.
lock:
	@test -x $(PIPTOOLS)/bin/pip-compile || { $(PYTHON) -m venv $(PIPTOOLS) && \
		$(PIPTOOLS)/bin/pip install -q pip-tools==7.6.2; }
	$(LOCK) --extra dev --extra-index-url https://download.pytorch.org/whl/cpu \
		-o requirements/dev.lock pyproject.toml
	$(LOCK) -c requirements/dev.lock -o requirements/server.lock pyproject.toml
	$(LOCK) -o requirements/agent.lock agent-requirements.txt

# docs/settings.md, generated from the settings' code and comments (dashboard/settingsdoc.py).
.PHONY: settings-doc
settings-doc: $(STAMP)
	$(BIN)/python -m dashboard.settingsdoc

test: $(STAMP)
	$(BIN)/python -m tests.runner $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check dashboard collectors tests bench demo

# Every bench, full size (tests/test_benches_smoke.py runs each with --smoke in `make test`).
bench: $(STAMP)
	$(BIN)/python bench/agent_bench.py
	$(BIN)/python bench/agent_trial_logs_bench.py
	$(BIN)/python bench/alert_bench.py
	$(BIN)/python bench/clusters_bench.py
	$(BIN)/python bench/evidence_bench.py
	$(BIN)/python bench/first_ingest_bench.py
	$(BIN)/python bench/gpu_bench.py
	$(BIN)/python bench/gpu_fleet_bench.py
	$(BIN)/python bench/gpu_reports_bench.py
	$(BIN)/python bench/history_scale_bench.py
	$(BIN)/python bench/ingest_bench.py
	$(BIN)/python bench/metrics_bench.py
	$(BIN)/python bench/nvml_poll_bench.py
	$(BIN)/python bench/page_load_bench.py
	$(BIN)/python bench/pages_bench.py
	$(BIN)/python bench/push_latency.py
	$(BIN)/python bench/quiet_history_bench.py
	$(BIN)/python bench/ray_cap_bench.py
	$(BIN)/python bench/ray_calls_bench.py
	$(BIN)/python bench/running_trials_bench.py
	$(BIN)/python bench/terminate_bench.py
	$(BIN)/python bench/trial_logs_bench.py

clean:
	rm -rf $(VENV) $(AGENT_VENV) .raywatch .pytest_cache
