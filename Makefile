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

# Regenerate the locks after changing dependencies (uv is a dev dependency). The runtime lock
# (what the image installs) is constrained by the dev lock, so both hold the same versions.
lock: install
	$(BIN)/python -m uv pip compile requirements.in -o requirements.lock --python-version 3.11 \
		--generate-hashes --no-emit-package a2a-agent-server
	$(BIN)/python -m uv pip compile requirements-runtime.in -o requirements-runtime.lock \
		--python-version 3.11 --generate-hashes --no-emit-package a2a-agent-server \
		-c requirements.lock

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
