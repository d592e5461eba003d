# Two commands do everything on a fresh machine with python3: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install run test lint lock clean interop-venv bench-js

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

# A real A2A 0.3 client (a2a-sdk 0.3.x) cannot share the venv with the 1.x SDK: it gets its own,
# hash-locked like the main one (tests/e2e/test_sdk03_client.py runs it against the server).
SDK03 := .venv-a2a03
SDK03_LOCK := tests/e2e/sdk03/requirements.lock

interop-venv: $(SDK03)/.installed

$(SDK03)/.installed: $(SDK03_LOCK)
	$(PYTHON) -m venv $(SDK03)
	$(SDK03)/bin/python -m pip install --quiet --require-hashes -r $(SDK03_LOCK)
	touch $@

# One pytest worker per core, each taking whole modules (a module's servers are started once, in
# its worker). Most of the suite's time is servers starting and tests waiting on them: two workers
# halve it on two cores. `pytest path/to/test.py` alone still runs in one process.
# TEST_WORKERS=4 on two cores overlaps more of the waiting (15 min instead of 23 on a loaded
# machine) but fails tests that bound a shared Redis's or PostgreSQL's answer times: not the default.
TEST_WORKERS ?= auto

test: install interop-venv
	$(BIN)/python -m pytest --numprocesses=$(TEST_WORKERS) --dist=loadfile

# The official JS SDK's server of bench/side_by_side.py (`--references js`, which also runs this
# on first use): its packages exactly as bench/js_reference/package-lock.json pins them.
bench-js:
	cd bench/js_reference && npm ci --ignore-scripts --no-audit --no-fund

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
	$(BIN)/python -m uv pip compile tests/e2e/sdk03/requirements.in -o $(SDK03_LOCK) \
		--python-version 3.11 --generate-hashes

clean:
	rm -rf $(VENV) $(SDK03) build *.egg-info .pytest_cache
