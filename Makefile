# Two entry points on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench clean postgresql chromium engines mutants peers docs

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

# The main job on the bundled sample export, charged to a fresh SQLite budget ledger under out/.
LEDGER := sqlite:///$(CURDIR)/out/ledger.db

run: $(STAMP)
	@mkdir -p out && rm -f out/ledger.db
	$(BIN)/python -m pipelines.budget create --ledger $(LEDGER) --dataset sample_survey \
	  --input sample_data/survey/ --epsilon 4 --delta 1e-6 --renewal monthly
	$(BIN)/python -m pipelines.release --config pipelines/configs/sample_survey.toml \
	  --output out --overwrite --ledger $(LEDGER) --dataset sample_survey
	$(BIN)/python -m pipelines.budget show --ledger $(LEDGER) --dataset sample_survey

lint: $(STAMP)
	$(BIN)/ruff check beam_dp pipelines tests benchmarks
	$(BIN)/ruff format --check beam_dp pipelines tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# The ledger's PostgreSQL tests start their own throwaway server (initdb + pg_ctl) from
# Debian's postgresql package; install it when it is missing and we may (root with apt-get).
# Only `make test` needs it: `make run` uses a SQLite ledger.
postgresql:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's postgresql for the ledger tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	else \
	  echo "warning: no PostgreSQL server binaries; install postgresql for the ledger tests" >&2; \
	fi

# The report test (tests/report/test_report.py) renders report.html in headless Chromium at 1000 and
# 1400 px, with fonts that have the glyphs of unicode labels (Noto: most scripts, CJK, emoji).
# Install Debian's chromium and the Noto fonts when missing and we may (root with apt-get); the
# test skips without chromium only when CI is unset. `make run` does not need them.
chromium:
	@if command -v chromium >/dev/null 2>&1 && fc-list 2>/dev/null | grep -q 'Noto Sans CJK'; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and Noto fonts for the report test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends chromium fonts-noto-core \
	    fonts-noto-cjk fonts-noto-color-emoji >/dev/null; \
	else \
	  echo "warning: no chromium or Noto fonts; install chromium fonts-noto-core" \
	    "fonts-noto-cjk fonts-noto-color-emoji" >&2; \
	fi

# The Flink and Spark runners (tests/engines): Java 17 and Maven from Debian when missing (root),
# Beam's Flink 1.19 and Spark 3 job servers built by Maven from Beam's runner libraries and put
# in Beam's jar cache (~/.apache_beam/cache/jars), and a Flink 1.19.3 distribution for a local
# cluster. Cached on this machine; engines/README.md says what and why.
engines:
	PYTHON=$(PYTHON) bash engines/install.sh

unit: $(STAMP) postgresql chromium engines
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q --durations=40

# The docs site (docs/, mkdocs.yml) into site/; strict: a broken link, a missing page or an API
# reference that does not resolve fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck docs unit

# Privacy mutants (issue 28): each change listed in tools/mutants.toml (a calibration constant,
# a sensitivity factor, a contribution bound, a budget split, a ledger state check, the identity
# rule) is applied to a copy of the tree, and its own tests must fail. Not part of `make test`.
mutants: $(STAMP) postgresql
	$(BIN)/python tools/mutants.py

bench: $(STAMP)
	$(BIN)/pip install --quiet -e ".[benchmarks]"
	$(BIN)/python -m benchmarks.selection

# The peers of benchmarks/real_panels.py (issue 38: OpenDP, PipelineDP, diffprivlib) and the
# panels' data package, with beam-dp itself, in their own venv: PipelineDP 0.3.1 needs
# Python < 3.12 and diffprivlib 0.6.6 scikit-learn < 1.6. Benchmark-only: beam_dp, pipelines
# and the tests never import them. Run: .peers-venv/bin/python -m benchmarks.real_panels
PEERS_PYTHON ?= python3.11
PEERS_VENV := .peers-venv
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): benchmarks/peers/requirements.txt setup.py pyproject.toml
	$(PEERS_PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/pip install --quiet -r benchmarks/peers/requirements.txt -e .
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

clean:
	rm -rf $(VENV) $(PEERS_VENV) build site *.egg-info .mypy_cache .ruff_cache .pytest_cache engines/*/target
