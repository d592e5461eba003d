"""The web console at /console: static ES modules served by the app itself (no CDN, nothing to
build), under a strict Content-Security-Policy: scripts and styles from this origin only, no
inline script, no eval, and calls only to this origin. The console is a client like any other:
it speaks A2A JSON-RPC to `/` (or `/{name}/`, the agent picked from `GET /agents`) with the
credentials the user gives it (docs/console.md)."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

STATIC = Path(__file__).with_name("console")
FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "a2a.js": "text/javascript; charset=utf-8",
    "extensions.js": "text/javascript; charset=utf-8",
    "turn_view.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:;"
    " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def console_file(request: Request) -> Response:
    name = request.path_params.get("name") or "index.html"
    media_type = FILES.get(name)
    if media_type is None:
        return PlainTextResponse("Not Found", 404)
    return FileResponse(STATIC / name, media_type=media_type, headers=HEADERS)


def console_routes() -> list[Route]:
    return [
        Route("/console", console_file, methods=["GET"]),
        Route("/console/", console_file, methods=["GET"]),
        Route("/console/{name}", console_file, methods=["GET"]),
    ]
