# Two commands do everything on a fresh machine with python3: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install run test lint lock clean

install: $(STAMP)

# The lock pins every dependency with hashes, so every machine installs exactly what was tested.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . || \
		$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

run: install
	$(BIN)/a2a-server

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check app agent stores tests
	$(BIN)/lint-imports

# Regenerate the lock after changing dependencies (needs uv: `pip install uv`).
lock:
	$(BIN)/python -m uv pip compile requirements.in -o requirements.lock --python-version 3.11 \
		--generate-hashes --no-emit-package a2a-agent-server

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
