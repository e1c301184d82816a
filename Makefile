# One target per habit. `make demo` and `make test` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml examples/demo_plugin/pyproject.toml | cksum | cut -d' ' -f1)
DEV_STAMP := $(VENV)/.installed-dev-$(shell cat pyproject.toml examples/demo_plugin/pyproject.toml examples/weather_plugin/pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install install-dev demo up test docs test-rabbitmq test-fast test-unit lint format bench bench-series bench-floor bench-provenance bench-agentdojo bench-cli chaos chaos-concurrency chaos-hosts architecture screenshots clean

install: $(STAMP)    ## warrant itself and the demo distribution (examples/demo_plugin) into .venv: what demo and up need (no test tools, no example plug-in)

$(STAMP): pyproject.toml examples/demo_plugin/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q -e examples/demo_plugin --no-deps
	rm -f $(VENV)/.installed-[0-9]*; touch $@

install-dev: $(DEV_STAMP)  ## + the test and lint tools, and the example plug-in the tests load (its tools then show in this venv's registries)

$(DEV_STAMP): pyproject.toml examples/demo_plugin/pyproject.toml examples/weather_plugin/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q -e examples/demo_plugin --no-deps
	$(PY) -m pip install -q -e examples/weather_plugin --no-deps
	rm -f $(VENV)/.installed-*; touch $@ $(STAMP)

demo: install        ## start the stack (embedded servers if none configured), run the seed scenarios
	$(VENV)/bin/warrant demo

up: install          ## every worker role in the foreground; Ctrl-C stops
	$(VENV)/bin/warrant up

PIPELINE_TESTS := $(addprefix tests/integration/test_,pipeline.py gate_pipeline.py tool_execution.py reconciler.py \
                  plugin_pipeline.py tool_inputs.py mcp.py example_plugin.py live_attempt.py ledger_commit.py \
                  flower.py solo_heartbeat.py external_proposals.py sub_runs.py routing.py)

test: install-dev        ## the whole suite on Redis, then the pipeline tests again on RabbitMQ, then the docs site
	$(PY) -m tests.preflight
	$(PY) -m pytest -ra
	$(MAKE) --no-print-directory test-rabbitmq
	$(MAKE) --no-print-directory docs

docs: install-dev        ## the documentation site (docs/, mkdocs.yml) into site/: a broken link or anchor fails it
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test-rabbitmq: install-dev  ## the pipeline tests with RabbitMQ as the broker (WARRANT_TEST_AMQP_URL)
	$(PY) -m pytest -ra --broker amqp $(PIPELINE_TESTS)

test-fast: install-dev   ## no Redis/RabbitMQ/PostgreSQL: every test using a service fixture is marked `services`
	$(PY) -m pytest -ra -m "not services and not slow"

test-unit: install-dev   ## tests/unit: the pure core and the packaging (no service fixture may be used there)
	$(PY) -m pytest -ra tests/unit

lint: install-dev
	$(VENV)/bin/ruff check runner tools broker ledger warrant tests examples bench
	$(VENV)/bin/ruff format --check runner tools broker ledger warrant tests examples bench
	$(VENV)/bin/mypy
	$(PY) -m tests.lint.architecture --check

format: install-dev
	$(VENV)/bin/ruff format runner tools broker ledger warrant tests
	$(VENV)/bin/ruff check --fix runner tools broker ledger warrant tests

bench: install-dev       ## benchmark against bare Celery and DBOS (prints ratios; see docs/benchmarks.md)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench

bench-floor: install-dev ## what a bare Celery worker spends per no-op message, on each pool and Redis transport warrant uses
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.celery_floor

bench-series: install-dev  ## the verdict: the side-by-side part 5 times, task events off and on, medians vs targets
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.series $(SERIES_ARGS)

architecture: install-dev  ## layer, cycle, SQL and size counts (ARCHITECTURE.md), then the house's figures (--house)
	$(PY) -m tests.lint.architecture
	$(PY) -m tests.lint.architecture --house

bench-provenance: install-dev  ## the provenance layer on 8x larger inputs: ratios (linear ~8, quadratic ~64); the gate on the largest observation set
	$(PY) -m bench.provenance_scaling

bench-agentdojo: install-dev  ## AgentDojo v1.2.2 (609 injection pairs, 97 benign tasks) through the gate: attacks through, benign done (docs/agentdojo.md)
	$(PY) -m pip install -q -e '.[agentdojo]'
	$(PY) -m bench.agentdojo $(AGENTDOJO_ARGS)

bench-cli: install-dev    ## CLI start-up: warrant --version and run list vs celery --version (median of 10)
	$(PY) -m bench.cli_startup

chaos: install-dev       ## worker SIGKILLs, Redis/PostgreSQL restarts, duplicate deliveries; then the checker
	$(PY) -m bench.chaos $(CHAOS_ARGS)

chaos-concurrency: install-dev  ## the concurrency campaign: hundreds in flight, duplicated deliveries, a Redis stall, a shared cap (issue 47)
	$(PY) -m bench.chaos --campaign concurrency $(CHAOS_ARGS)

chaos-hosts: install-dev  ## the multi-host fault suite: hosts in network namespaces (root), partitions, kills, skewed clocks, twin host names
	$(PY) -m bench.chaos_hosts $(CHAOS_HOSTS_ARGS)

screenshots: install-dev  ## the inbox test, keeping its screenshot as docs/inbox.png (docs/http-api.md)
	WARRANT_UPDATE_SCREENSHOTS=1 $(PY) -m pytest -q tests/integration/test_inbox.py -k appear

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
