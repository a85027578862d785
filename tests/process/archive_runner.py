"""``python -m tests.process.archive_runner ARGS...``: ``opledger ARGS...`` with small archive runs.

An archive segment holds :data:`SEGMENT_OPERATIONS` operations and a removal transaction
:data:`REMOVE_BATCH`, so that a handful of operations crosses every commit boundary of
``opledger archive`` (several segments, several removal batches each):
``tests/process/test_archive_crashes.py``.
"""

from __future__ import annotations

import adapters.archive_run
from adapters.cli.app import main

SEGMENT_OPERATIONS = 3
REMOVE_BATCH = 2

if __name__ == "__main__":
    adapters.archive_run.SEGMENT_OPERATIONS = SEGMENT_OPERATIONS
    adapters.archive_run.REMOVE_BATCH = REMOVE_BATCH
    main()
