"""A worker raises its open-file limit to fit its egress slots (ADR 0009 step 2): each call in
flight holds a connection (``adapters.runtime.raise_open_files_limit``)."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from adapters.runtime import OPEN_FILES_MARGIN, raise_open_files_limit


@pytest.fixture
def restored_limit() -> Iterator[tuple[int, int]]:
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def test_the_soft_limit_is_raised_to_fit_the_slots(restored_limit: tuple[int, int]) -> None:
    _, hard = restored_limit
    if hard != resource.RLIM_INFINITY and hard < 1024 + OPEN_FILES_MARGIN:
        pytest.skip(f"the hard limit ({hard}) leaves no room to test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    assert raise_open_files_limit(1024) == 1024 + OPEN_FILES_MARGIN
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1024 + OPEN_FILES_MARGIN, hard)
    assert raise_open_files_limit(16) == 1024 + OPEN_FILES_MARGIN  # never lowered


def test_the_hard_limit_is_never_passed(restored_limit: tuple[int, int]) -> None:
    _, hard = restored_limit
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit to stop at")
    assert raise_open_files_limit(hard + 1) == hard  # and a warning says calls past it fail
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
