"""The README's embedding example, run as a user would copy it: it builds, lists its own tools
as skills, and answers with its tool (the offline demo model calls `add`)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import httpx

README = Path(__file__).resolve().parents[2] / "README.md"


async def test_the_embedding_example_serves_its_tools(tmp_path: Path, capsys) -> None:
    text = README.read_text()
    section = text[text.index("### Embedding it in your program") :]
    [source] = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    path = tmp_path / "my_agent.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("my_agent_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_agent_example"] = module
    spec.loader.exec_module(module)
    app = module.app
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            card = (await client.get("/.well-known/agent-card.json")).json()
            assert card["name"] == "My agent"
            assert {"add", "now"} <= {skill["name"] for skill in card["skills"]}
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_USER",
                        "parts": [{"text": "add 2 3"}],
                    }
                },
            }
            answer = await client.post("/", json=body, headers={"A2A-Version": "1.0"})
    task = answer.json()["result"]["task"]
    assert "The tool said: 5." in task["artifacts"][0]["parts"][0]["text"]
    assert "turn of task" in capsys.readouterr().out  # the example's hook ran
