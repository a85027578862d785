"""Request bodies read with a size limit: refused with 413 problem+json before anything is stored.

Both the declared ``Content-Length`` and the bytes actually read are checked, so a client that
declares nothing (chunked) or declares less than it sends is stopped at the limit too.

Source: RFC 9110 §15.5.14 (413 Content Too Large); tryout R2.
"""

from __future__ import annotations

from fastapi import Request

from adapters.http.problems import Problem


async def read_bounded_body(request: Request, limit: int, *, what: str) -> bytes:
    """The request's body, at most ``limit`` bytes.

    Args:
        request: the incoming request (its body not read yet).
        limit: the largest body accepted, bytes.
        what: how the message names the body, e.g. ``"a command body"``.

    Raises:
        Problem: 413 ``body_too_large`` when ``Content-Length`` or the bytes read exceed ``limit``.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(what, limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(what, limit)
    return bytes(body)


def _too_large(what: str, limit: int) -> Problem:
    return Problem(413, "Body too large", f"{what} is at most {limit:,} bytes", code="body_too_large")
