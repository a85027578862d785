"""Bearer tokens with roles for the observe API, operator actions and the console.

Tokens are configured per operator (``OPLEDGER_API_TOKENS``, JSON: ``{"<token>": {"principal":
"alice", "roles": ["operator"]}}``). Roles: ``viewer`` reads; ``operator`` also resolves, retries a
blocked settlement and cancels; ``approver`` also approves and denies. The principal recorded
on the timeline is the token's, never one the request names.

Source: issue 13 item 2; RFC 6750 (bearer tokens).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Annotated, Literal

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from adapters.http.problems import Problem

Role = Literal["viewer", "operator", "approver"]
ACTION_ROLES: dict[str, Role] = {"resolve": "operator", "retry_settlement": "operator", "cancel": "operator",
                                 "approve": "approver", "deny": "approver"}
"""Which role each operator action needs (reads need any role)."""


class TokenGrant(BaseModel):
    """What one bearer token allows.

    Attributes:
        principal: who acts (recorded on the timeline), e.g. ``alice``.
        roles: ``viewer``, ``operator``, ``approver`` (any of them may read).
    """

    principal: str = Field(min_length=1, max_length=200)
    roles: list[Role] = Field(min_length=1)


bearer = HTTPBearer(auto_error=False, description="a token from OPLEDGER_API_TOKENS")


def find_grant(tokens: Mapping[str, TokenGrant], presented: str) -> TokenGrant | None:
    """The grant of ``presented``, compared in constant time with every configured token."""
    found = None
    for token, grant in tokens.items():
        if hmac.compare_digest(token.encode(), presented.encode()):
            found = grant
    return found


def bearer_grant(tokens: Mapping[str, TokenGrant], authorization: str | None) -> TokenGrant | None:
    """The grant of an ``Authorization`` header's bearer token, or None.

    Args:
        tokens: the configured tokens and their grants.
        authorization: the header's value, e.g. ``Bearer abc...`` (the scheme in any case), or None.

    Returns:
        The grant, or None when the header is missing, not a bearer token, or an unknown token.

    Source: RFC 6750 §2.1.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return find_grant(tokens, token.strip())


def unauthorized() -> Problem:
    """The 401 for a request without a configured bearer token (RFC 6750 §3: ``WWW-Authenticate``)."""
    return Problem(401, "Unauthorized", "send Authorization: Bearer <token> with a configured token",
                   headers={"WWW-Authenticate": "Bearer"})


def principal_with(role: Role | None) -> Callable[..., TokenGrant]:
    """A FastAPI dependency: the request's grant, which must hold ``role`` (any role when None).

    Raises (as problem+json):
        401: no bearer token, or an unknown one.
        403: the token lacks ``role``.
    """

    def dependency(request: Request,
                   credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> TokenGrant:
        tokens: Mapping[str, TokenGrant] = request.app.state.tokens
        grant = find_grant(tokens, credentials.credentials) if credentials is not None else None
        if grant is None:
            raise unauthorized()
        if role is not None and role not in grant.roles:
            raise Problem(403, "Forbidden", f"this action needs the {role} role; {grant.principal} has "
                                            f"{', '.join(grant.roles)}")
        return grant

    return dependency
