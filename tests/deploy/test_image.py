"""The image as the Dockerfile builds it (no Docker engine here: its parts are checked one by one):
hadolint-clean, installs the runtime lock only (which agrees with the dev lock the tests ran on),
and its entrypoint, run with the image's environment, fails closed without credentials and serves
with them."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# a2a-sdk is a runtime dependency: the gRPC binding's generated code (app/grpc/).
DEV_TOOLS = {"pytest", "mypy", "ruff", "schemathesis", "hypothesis", "helm-python-sdk"}


def pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    return {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M)}


def image_env() -> dict[str, str]:
    """The ENV of the Dockerfile's final stage."""
    final_stage = (ROOT / "Dockerfile").read_text().split("\nFROM ")[-1]
    env: dict[str, str] = {}
    for block in re.findall(r"^ENV (.+?)(?<!\\)$", final_stage, re.M | re.S):
        for item in shlex.split(block.replace("\\\n", " ")):
            name, _, value = item.partition("=")
            env[name] = value
    return env


def test_the_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [str(BIN / "hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_installs_the_runtime_lock_only() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes -r requirements-runtime.lock" in dockerfile
    assert "requirements.lock" not in dockerfile.replace("requirements-runtime.lock", "")
    runtime = pins("requirements-runtime.lock")
    assert not DEV_TOOLS & set(runtime), DEV_TOOLS & set(runtime)
    assert {"uvicorn", "uvloop", "httptools", "litellm", "redis", "grpcio", "a2a-sdk"} <= set(
        runtime
    )


def test_the_runtime_lock_holds_the_versions_the_tests_ran_on() -> None:
    runtime, dev = pins("requirements-runtime.lock"), pins("requirements.lock")
    differ = {
        name: (version, dev.get(name))
        for name, version in runtime.items()
        if dev.get(name) != version
    }
    assert not differ, f"runtime lock vs dev lock: {differ} (run `make lock`)"


@pytest.mark.timeout(60)
def test_the_entrypoint_with_the_image_environment_fails_closed_then_serves() -> None:
    env = {**os.environ, **image_env(), "A2A_PORT": str(free_port())}
    env.pop("A2A_API_KEYS", None)
    assert env["A2A_HOST"] == "0.0.0.0"
    refused = subprocess.run(
        [str(BIN / "a2a-server")], env=env, capture_output=True, text=True, timeout=30
    )
    assert refused.returncode == 2, refused.stderr
    assert "A2A_API_KEYS" in refused.stderr and "Traceback" not in refused.stderr

    env["A2A_API_KEYS"] = "ops:k-0123456789abcdef"
    server = subprocess.Popen(
        [str(BIN / "a2a-server")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{env['A2A_PORT']}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.1)
        assert httpx.get(f"{url}/tasks", timeout=5).status_code == 401
        headers = {"X-API-Key": "k-0123456789abcdef"}
        assert httpx.get(f"{url}/tasks", headers=headers, timeout=5).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
