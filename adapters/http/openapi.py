"""Print the observe API's OpenAPI document: ``python -m adapters.http.openapi > docs/openapi.json``.

Builds the app over an in-memory description only (no store is opened).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import FastAPI


def document() -> dict[str, Any]:
    """The OpenAPI document ``opledger serve`` publishes at ``/openapi.json``."""
    from adapters.http.app import VERSION, build_app

    app: FastAPI = build_app()
    assert app.version == VERSION
    return app.openapi()


if __name__ == "__main__":
    sys.stdout.write(json.dumps(document(), indent=2, sort_keys=True) + "\n")
