"""The adapter names this process knows, which integration declarations may name.

``opledger worker`` builds the adapters of :data:`BUILT_IN_ADAPTERS`
(``adapters.runtime.build_adapters``). A host that runs its own worker with an adapter of its own
(``Worker(adapters={"smtp": ...})``), and the simulator with its simulated providers, register the
name first (:func:`register_adapter`), before any declaration naming it is parsed. A declaration
naming any other adapter is refused when it is parsed (``Integration``: ``adapter``), naming the
nearest known one, rather than by the worker at start or, worse, never.

Source: DESIGN §3 ('integration': adapter); issue 34 item 3.
"""

from __future__ import annotations

import difflib
import re
import threading

__all__ = ["BUILT_IN_ADAPTERS", "adapter_problem", "known_adapters", "register_adapter"]

BUILT_IN_ADAPTERS = ("webhook", "lro", "fake")
"""The adapters ``opledger worker`` builds: the HTTP webhook, the long-running-operation client
(AIP-151) and the in-memory fake (``adapters.runtime.build_adapters``)."""
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_known: set[str] = set(BUILT_IN_ADAPTERS)
_lock = threading.Lock()


def register_adapter(name: str) -> str:
    """Let declarations in this process name the adapter ``name`` (idempotent).

    Args:
        name: lower-case letters, digits and underscores, starting with a letter (as
            ``Integration.adapter``).

    Returns:
        ``name``, so a module can write ``SMTP = register_adapter("smtp")``.

    Raises:
        ValueError: ``name`` is not such a name.

    Source: issue 34 item 3.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"an adapter name is lower-case letters, digits and underscores, got {name!r}")
    with _lock:
        _known.add(name)
    return name


def known_adapters() -> tuple[str, ...]:
    """The adapter names declarations may use in this process: the built-in ones first."""
    with _lock:
        registered = sorted(_known - set(BUILT_IN_ADAPTERS))
    return (*BUILT_IN_ADAPTERS, *registered)


def adapter_problem(name: str) -> str | None:
    """What is wrong with naming ``name`` as a declaration's adapter here, or None.

    Args:
        name: the declared adapter.

    Returns:
        e.g. ``unknown adapter 'webhok' (this process knows webhook, lro, fake; did you mean
        'webhook'?) ...``.
    """
    known = known_adapters()
    if name in known:
        return None
    nearest = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    return (f"unknown adapter {name!r} (this process knows {', '.join(known)}{hint}); an adapter of your own "
            f"is registered with ledger.register_adapter({name!r}) before the declaration")
