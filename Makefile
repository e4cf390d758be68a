# haclient: set-up, checks, tests and the demo.
#
# `make test` and `make demo` do all the set-up on a fresh Debian machine (as root): the
# virtualenv in .venv and, again only when a pyproject.toml changes, the client and the test bed
# (`pip install -e . -e ./chaos`) for the demo, everything (the dev, docs, metrics and spark
# extras too) for the tests; and Debian's rabbitmq-server, postgresql, prometheus and chromium
# when they are missing. `make docs` and `make docs-check` install the docs extra only.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
DOCS_STAMP := $(VENV)/.installed-docs
PROJECTS := pyproject.toml chaos/pyproject.toml
# Bytecode is written (some machines set PYTHONDONTWRITEBYTECODE): without the cached
# rewrites each pytest worker rewrote the asserts of every test module and compiled the library
# again, about 6 s of a core per worker and run.
unexport PYTHONDONTWRITEBYTECODE
# Non-root users on Debian have no /usr/sbin on PATH, where rabbitmq-server lives.
export PATH := $(PATH):/usr/sbin
# mkdocs-material's banner about its successor, printed on every build.
export NO_MKDOCS_2_WARNING := 1

# Worker processes of pytest-xdist. Most tests wait on sockets and timers rather than compute,
# so more workers than this machine kind's 2 cores pay (README.md, Tests: wall time by workers).
TEST_WORKERS ?= 4
# The quick tier: everything that needs no broker but the in-process reference broker; its
# tests are short and wait more than they compute (two cores about 60 % busy at six workers), so
# twelve workers pay: 59 s where six took 69 s (README.md, Tests).
QUICK_WORKERS ?= 12
# Slow tiers first: the workers start with the long tests and end on the short ones together.
QUICK_TIERS := tests/peer tests/rules tests/engine tests/codec tests/selector tests/unit
STAGE := .ci/stage

.PHONY: test test-quick test-under-load check-machine demo docs docs-check bench lint setup \
	rabbitmq postgresql prometheus chromium clean distclean

# Every check and the whole suite, each stage timed (the breakdown is printed at the end).
# tests/packaging builds the wheels and installs them into a fresh virtualenv (slow marker).
# Tests marked `alone` run after the workers, one at a time: the Spark job's own JVM needs a
# core of its own (beside four busy workers its set-up took 31-54 s; alone 17-19 s).
# The set-up is a plain `make`, which `make -n test` prints instead of running.
test:
	@rm -f build/stages.txt
	@$(STAGE) set-up make --no-print-directory setup
	@$(STAGE) lint sh -c '$(BIN)/ruff check . && $(BIN)/ruff format --check .'
	@$(STAGE) types $(BIN)/mypy
	@$(STAGE) docs $(BIN)/mkdocs build --strict --quiet --site-dir build/site
	@$(STAGE) pytest $(BIN)/pytest -n $(TEST_WORKERS) -m "not alone"
	@$(STAGE) alone $(BIN)/pytest -m alone
	@$(STAGE) --report

# The edit-test loop: the unit, codec, engine, selector and peer tiers and the rule tests on
# the reference broker only (no RabbitMQ, no PostgreSQL, no Spark, no packaging), about a
# minute; the property tests draw a quarter of their examples, the machine's model check goes to depth 5
# (about 4,400 event sequences, under a second; `make test` draws them all and goes to depth 6).
test-quick: $(STAMP)
	HACLIENT_PROPERTY_SCALE=0.25 HACLIENT_MACHINE_DEPTH=5 $(BIN)/pytest -n $(QUICK_WORKERS) -m "not rabbitmq and not postgresql" $(QUICK_TIERS)

# The model check of the failover machine (failover/machine.py) in full: every event sequence
# to depth 8 over three brokers, with the spare, a return, redirects and close
# (tests/unit/machine_model.py); the default test run explores depth 6.
MACHINE_DEPTH ?= 8
check-machine: $(STAMP)
	HACLIENT_MACHINE_DEPTH=$(MACHINE_DEPTH) $(BIN)/pytest -n 0 -s --timeout 3600 \
		tests/unit/test_failover_machine.py -k every_event_sequence

# `make test` three times in a row with one core kept busy: the suite must stay green on a
# loaded machine (.ci/under-load says how; RUNS=1 for one run).
RUNS ?= 3
test-under-load:
	.ci/under-load $(RUNS)

# The demo needs the client and the test bed only: no Spark, no test tools.
demo: $(DEMO_STAMP)
	$(BIN)/python -m chaos.demo

# The documentation site, served on http://127.0.0.1:8000 while its sources change.
docs: $(DOCS_STAMP)
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# The site built and every page opened in headless Chromium at 1280 px: fails on a list
# rendered as a paragraph, a code block or table wider than the column, a broken link or
# image, a warning of the build. Screenshots of the main pages in build/docs-check/.
docs-check: $(DOCS_STAMP) chromium
	$(BIN)/python -m tools.docs_check

bench: setup
	$(BIN)/python -m bench.throughput --messages 20000 --repeat 5 --json bench/results.json
	$(BIN)/python -m bench.broker --messages 20000 --repeat 5 --json bench/broker-results.json
	$(BIN)/python -m bench.jms --count 5000 --pipelined-count 20000 --rounds 3
	$(BIN)/python -m bench.payload
	$(BIN)/python -m bench.failover
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.metrics
	$(BIN)/python -m bench.tracing --rounds 7
	$(BIN)/python -m bench.spark --rows 10000 --rounds 2
	$(BIN)/python -m bench.outbox --count 5000 --rounds 3

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

setup: $(STAMP) rabbitmq postgresql prometheus chromium

$(BIN)/python:
	@if ! $(PYTHON) -c 'import ensurepip' 2>/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "== installing python3-venv (Debian)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends python3-venv; \
	fi
	$(PYTHON) -m venv $(VENV)

$(DEMO_STAMP): $(PROJECTS) | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e . -e ./chaos
	touch $@

$(STAMP): $(PROJECTS) | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[dev,spark]' -e ./chaos
	touch $@ $(DEMO_STAMP) $(DOCS_STAMP)

# The site needs the docs extra only (no Spark, no test tools).
$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[docs]'
	touch $@

# $(call apt_install,COMMAND,PACKAGE,WHAT SKIPS WITHOUT IT): install a Debian package unless its
# command is on PATH; without root, say what will skip instead.
define apt_install
	if command -v $(1) >/dev/null; then \
		: already installed; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "== $(2) is missing and installing it needs root: $(3)"; \
	else \
		echo "== installing $(2) (Debian)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends $(2); \
	fi
endef

rabbitmq:
	@$(call apt_install,rabbitmq-server,rabbitmq-server,RabbitMQ tests will skip)

# The outbox and inbox tests on PostgreSQL start a private server from Debian's binaries, which
# live in /usr/lib/postgresql/<version>/bin, off PATH (tests/conftest.py, postgres_server).
PG_SERVER := $(or $(lastword $(wildcard /usr/lib/postgresql/*/bin/postgres)),postgres)
postgresql:
	@$(call apt_install,$(PG_SERVER),postgresql,the PostgreSQL tests will skip)

# The metrics test scrapes haclient with a real Prometheus server (no service is started).
prometheus:
	@$(call apt_install,prometheus,prometheus,its test will skip)

# `make docs-check` opens the site in Debian's Chromium (Playwright drives it; no browser is
# downloaded).
chromium:
	@$(call apt_install,chromium,chromium,make docs-check cannot run)

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info $(STAMP) \
		$(DEMO_STAMP) $(DOCS_STAMP) chaos/build chaos/*.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
