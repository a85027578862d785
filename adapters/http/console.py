"""The operator console at ``/console``: one static page over the observe API (no build step).

The page keeps the operator's bearer token in the browser tab's session storage and calls the
same ``/v1`` routes as any client, so it can do exactly what the token's roles allow; every text it
shows is set as text, never as HTML. Choice and alternatives: docs/adr/0003-operator-console.md.

Source: issue 13 item 3.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

router = APIRouter(tags=["console"], include_in_schema=False)
_STATIC = files("adapters.http") / "static"
_SCRIPT = "text/javascript; charset=utf-8"
_TYPES = {"console.js": _SCRIPT, "console-format.js": _SCRIPT, "console-operation.js": _SCRIPT,
          "console-charts.js": _SCRIPT, "console.css": "text/css; charset=utf-8",
          "favicon.svg": "image/svg+xml"}  # the tab's icon: without one, every visit logs a 404
# The page loads only its own script and style, and talks only to this server.
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@router.get("/console", response_class=HTMLResponse)
def page() -> HTMLResponse:
    return HTMLResponse((_STATIC / "console.html").read_text(), headers={"Content-Security-Policy": _CSP})


@router.get("/console/{name}")
def asset(name: str) -> Response:
    if name not in _TYPES:
        return Response(status_code=404)
    return Response((_STATIC / name).read_text(), media_type=_TYPES[name])
