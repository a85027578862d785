"""The README's test command installs without a resolver conflict (issue 34 item 8).

Walks every requirement of ``opledger[test,browser]``, transitively, with the markers of this
interpreter, and checks that the installed version of each satisfies every requirement on it:
what pip's resolver checks. httpbin's ``greenlet<3`` (on Python < 3.12) against Playwright's
greenlet 3 failed here, and printed a conflict on every install.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

README = Path(__file__).resolve().parents[2] / "README.md"
EXTRAS = ("test", "browser")


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras or {""})


def test_the_test_command_installs_both_extras_in_one_call() -> None:
    block = README.read_text().split("<!-- test-command -->")[1].split("<!-- /test-command -->")[0]
    installs = re.findall(r"pip install [^&]*", block)
    assert installs == ["pip install -q -e '.[test,browser]' "]


def test_every_installed_requirement_of_the_extras_is_satisfied() -> None:
    conflicts: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [("opledger", frozenset(EXTRAS))]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for line in distribution(name).requires or []:
            requirement = Requirement(line)
            if not _applies(requirement, extras):
                continue
            try:
                installed = distribution(requirement.name).version
            except PackageNotFoundError:
                conflicts.append(f"{name} needs {requirement}, which is not installed")
                continue
            if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
                conflicts.append(f"{name} needs {requirement}, installed {installed}")
            todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    assert not conflicts, conflicts
