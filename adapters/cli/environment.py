"""Unknown ``OPLEDGER_*`` variables, reported when a command starts.

Every ``OPLEDGER_*`` name opledger reads is known here: the fields of each settings class
(``ledger.config.Settings``, ``ledger.provenance.ProvenanceSettings``; ``serve``'s ``ServeSettings``, ``HttpLimits`` and
``ReceiptSettings``), the ``OPLEDGER_SECRET_<NAME>`` family (secrets, callback secrets
included), the few variables read directly (the fault injection point, the reference
partner's secrets) and those the test suite and the benchmarks read. A set variable outside
them is named with the nearest known name (``ledger.setting_names``), as a warning: other tools
may share the prefix, so it is never a refusal. The HTTP settings classes are imported only
when a variable is unknown to the core settings, so most commands never load FastAPI for this.

Source: issue 34 item 3.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ledger.config import Settings
from ledger.failpoints import FAILPOINT_ENV
from ledger.provenance import ProvenanceSettings
from ledger.setting_names import UnknownSetting, env_names, unknown_settings

__all__ = ["FAMILIES", "READ_DIRECTLY", "known_names", "unknown_environment"]

FAMILIES = ("OPLEDGER_SECRET_", "OPLEDGER_TEST_", "OPLEDGER_BENCH_")
"""Prefixes read with any suffix: secrets (``executors.secrets.ENV_PREFIX``), and the test
suite's and the benchmarks' own settings (``tests/conftest.py``, ``bench/``)."""
READ_DIRECTLY = frozenset({
    FAILPOINT_ENV,  # ledger.failpoints: process tests' crash points
    "OPLEDGER_PARTNER_SECRET",  # the reference partner (adapters.partner.server.SECRET_ENV)
    "OPLEDGER_PARTNER_CALLBACK_SECRET",  # adapters.partner.callbacks.CALLBACK_SECRET_ENV
    "OPLEDGER_UPDATE_SCREENSHOT", "OPLEDGER_CHROMIUM",  # the console's browser tests
})
"""Variables read with ``os.environ`` rather than through a settings class."""


def known_names() -> frozenset[str]:
    """Every exact ``OPLEDGER_*`` name some part of opledger reads (imports the HTTP settings).

    Returns:
        The names, upper case.
    """
    from adapters.http.app import ServeSettings
    from adapters.http.commands import ReceiptSettings
    from adapters.http.limits import HttpLimits

    return (env_names(Settings) | env_names(ProvenanceSettings) | env_names(ServeSettings) | env_names(HttpLimits)
            | env_names(ReceiptSettings) | READ_DIRECTLY)


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[UnknownSetting]:
    """The set ``OPLEDGER_*`` variables nothing reads, each with the nearest known name.

    Args:
        environ: the environment (``os.environ`` by default).

    Returns:
        Sorted by name; empty when every one is read.

    Source: issue 34 item 3.
    """
    environ = os.environ if environ is None else environ
    core = env_names(Settings) | env_names(ProvenanceSettings) | READ_DIRECTLY
    if not unknown_settings(environ, known=core, prefixes=FAMILIES):
        return []  # the common case, without importing the HTTP server's settings
    return unknown_settings(environ, known=known_names(), prefixes=FAMILIES)
