"""Which ``OPLEDGER_*`` environment variables a process reads, and which set ones it does not.

A misspelt setting (``OPLEDGER_LEASE_SECOND=5`` for ``OPLEDGER_LEASE_SECONDS``) is otherwise
ignored without a word: pydantic-settings reads only the names it knows. :func:`unknown_settings`
compares the environment with the names every settings class reads (:func:`env_names`), the
families read by prefix (``OPLEDGER_SECRET_<NAME>``) and the few read directly, and names the
nearest known one. Commands report them as a warning, not a refusal: other tools may share the
prefix (a deployment's own ``OPLEDGER_*`` variables, a newer opledger's settings in a shared
environment during an upgrade), and a setting nobody reads changes nothing.

Source: issue 34 item 3.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from pydantic_settings import BaseSettings

__all__ = ["PREFIX", "UnknownSetting", "env_names", "unknown_settings"]

PREFIX = "OPLEDGER_"
NEAREST_CUTOFF = 0.75
"""How alike (``difflib`` ratio, 0 to 1, after ``OPLEDGER_``) a known name must be to be offered
as the one meant."""


@dataclass(frozen=True, slots=True)
class UnknownSetting:
    """A set ``OPLEDGER_*`` variable no part of opledger reads.

    Attributes:
        name: the variable as set.
        nearest: the known name it most resembles, if any is close (``OPLEDGER_SECRET_CARD`` for
            ``OPLEDGER_SECERT_CARD``).
    """

    name: str
    nearest: str | None

    def __str__(self) -> str:
        hint = f"; did you mean {self.nearest}?" if self.nearest else ""
        return f"{self.name} is not an opledger setting and is ignored{hint}"


def env_names(settings_class: type[BaseSettings]) -> frozenset[str]:
    """The environment variables a pydantic-settings class reads: its prefix and each field, upper case.

    Args:
        settings_class: e.g. ``ledger.config.Settings``.

    Returns:
        e.g. ``{"OPLEDGER_DATABASE_URL", "OPLEDGER_LEASE_SECONDS", ...}``.
    """
    prefix = str(settings_class.model_config.get("env_prefix") or "")
    return frozenset(f"{prefix}{name}".upper() for name in settings_class.model_fields)


def unknown_settings(environ: Mapping[str, str], *, known: Collection[str],
                     prefixes: Iterable[str] = ()) -> list[UnknownSetting]:
    """The ``OPLEDGER_*`` variables of ``environ`` that no known name or prefix covers, sorted. Pure.

    Names are compared in upper case, as pydantic-settings reads them.

    Args:
        environ: the process environment.
        known: every exact name read (upper case).
        prefixes: families read by prefix, e.g. ``OPLEDGER_SECRET_`` (any ``<NAME>`` after it).

    Returns:
        One :class:`UnknownSetting` per unread variable, with the nearest known name when one is
        close (:data:`NEAREST_CUTOFF`); for a family, the family's prefix with the same suffix.

    Source: issue 34 item 3.
    """
    families = tuple(prefixes)
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known or upper.startswith(families):
            continue
        found.append(UnknownSetting(name=name, nearest=_nearest(upper, known, families)))
    return found


def _nearest(name: str, known: Collection[str], families: tuple[str, ...]) -> str | None:
    candidates = set(known)
    # A misspelt family word (OPLEDGER_SECERT_CARD): offer the family with the same suffix.
    word, _, rest = name[len(PREFIX):].partition("_")
    for family in families:
        family_word = family[len(PREFIX):].rstrip("_")
        if rest and difflib.SequenceMatcher(None, word, family_word).ratio() >= NEAREST_CUTOFF:
            candidates.add(family + rest)
    # Compared without the shared prefix, which would make every name look alike.
    by_rest = {candidate[len(PREFIX):]: candidate for candidate in candidates if candidate.startswith(PREFIX)}
    match = difflib.get_close_matches(name[len(PREFIX):], sorted(by_rest), n=1, cutoff=NEAREST_CUTOFF)
    return by_rest[match[0]] if match else None
