# The README's two commands: `make serve` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gramserve-installed
HOST ?= 127.0.0.1
PORT ?= 8000
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install serve test test-unit prepare-model browser

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh $(VENV)
	@touch $(STAMP)

install: $(STAMP)

prepare-model: install
	$(VENV)/bin/gramserve prepare-model

serve: install
	$(VENV)/bin/gramserve prepare-model
	$(VENV)/bin/gramserve serve --host $(HOST) --port $(PORT) $(ARGS)

# The playground's browser test needs Debian's Chromium and ChromeDriver (installed when missing).
browser:
	bash scripts/ensure-browser.sh

test: install browser
	$(VENV)/bin/gramserve prepare-model
	GRAMSERVE_STRICT_SKIPS=1 $(PY) -m pytest $(PYTEST_ARGS)

test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)
