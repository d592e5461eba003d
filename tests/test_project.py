"""Project-level checks: docs match the settings, layering holds, LiteLLM stays in one module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.settings import configuration_table

ROOT = Path(__file__).resolve().parent.parent


def test_readme_configuration_table_matches_settings() -> None:
    readme = (ROOT / "README.md").read_text()
    assert configuration_table() in readme, (
        "README's configuration table drifted from app/settings/; paste the output of\n"
        "  .venv/bin/python -c 'from app.settings import configuration_table as t; print(t())'"
    )


def test_imports_flow_app_agent_stores() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_the_adapter_imports_litellm() -> None:
    importers = [
        path.relative_to(ROOT).as_posix()
        for package in ("app", "agent", "stores")
        for path in (ROOT / package).rglob("*.py")
        if "import litellm" in path.read_text() or "from litellm" in path.read_text()
    ]
    assert importers == ["agent/llm/litellm.py"]


def test_starting_the_app_does_not_import_litellm() -> None:
    """LiteLLM's import costs seconds: it must happen lazily, off the request path."""
    code = (
        "import sys; from app.main import create_app; from app.settings import Settings;"
        " create_app(Settings(llm_model='openai/x'));"
        " assert 'litellm' not in sys.modules, 'litellm imported eagerly'"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_helm_chart_config_uses_setting_names() -> None:
    """The chart's `config` keys are environment variables the server actually reads."""
    import yaml

    from app.settings import Settings

    values = yaml.safe_load((ROOT / "helm" / "a2a-agent-server" / "values.yaml").read_text())
    known = {name.upper() for name in Settings.model_fields}
    assert set(values["config"]) <= known, set(values["config"]) - known


def test_openapi_document_matches_the_app() -> None:
    from app.a2a.openapi import render

    assert (ROOT / "openapi" / "openapi.json").read_text() == render(), (
        "openapi/openapi.json drifted; run: .venv/bin/python -m app.a2a.openapi > openapi/openapi.json"
    )


def _tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    # examples/: the code the docs walk through is held to the product's standard.
    command = [str(Path(sys.executable).parent / name), *args, "app", "agent", "stores", "examples"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def test_product_code_passes_ruff() -> None:
    result = _tool("ruff", "check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_product_code_passes_mypy_strict() -> None:
    result = _tool("mypy", "--strict")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_engine_contract_names_every_engine_module() -> None:
    """import-linter forbids the runtime to the modules it is given: a new engine module left off
    the list would be free to import the runtime, so the list must be the whole engine."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (engine,) = [
        contract
        for contract in contracts["contracts"]
        if contract["name"] == "the engine never imports the runtime"
    ]
    children = {
        f"agent.{path.stem}"
        for path in (ROOT / "agent").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert set(engine["source_modules"]) == children - {"agent.runtime"}


PRODUCT = ("app", "agent", "stores")


def test_no_product_module_is_over_400_lines_nor_a_folder_over_20_modules() -> None:
    """The house's limits: a module that grows past them is split by what it does."""
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 400
    }
    assert long == {}
    crowded = {
        folder.relative_to(ROOT).as_posix(): count
        for package in PRODUCT
        for folder in [ROOT / package, *(ROOT / package).rglob("*/")]
        if folder.is_dir() and (count := len(list(folder.glob("*.py")))) > 20
    }
    assert crowded == {}


def test_the_libraries_whose_private_names_are_used_are_bounded() -> None:
    """uvicorn's request-task hook and servers (app/http), redis-py's parser internals
    (stores/redis/batch.py): a release past the one they were written against may move them, so
    the package admits none (the fast paths fall back, but unmeasured)."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bounds = {
        (requirement := Requirement(spec)).name: requirement.specifier
        for spec in project["dependencies"]
    }
    for name in ("uvicorn", "redis"):
        assert any(spec.operator in ("<", "<=", "==", "~=") for spec in bounds[name]), name
