"""History the running code cannot read: the check ``opledger migrate`` and a worker run at start.

An event stored by a newer version (a type this code lacks) or under a renamed class's old topic
that nobody registered cannot be decoded here. The status projection puts each affected
operation on the attention queue (``unreadable_event``) as it meets the record; this check says
so before anything runs, for the whole store at once, and refuses to start unless told to.

Source: issue 10 item 5; docs/operations.md ("Events this code cannot read").
"""

from __future__ import annotations

import structlog
from eventsourcing.application import Application

from ledger.errors import UnreadableHistoryError
from ledger.topics import unresolvable_topics
from projections.loading import stored_ledger_topics
from projections.rows import ledger_topics, read_topics

log = structlog.get_logger("opledger.history")


def check_readable_history(app: Application, *, allow_unreadable: bool = False) -> dict[str, int]:
    """Count the stored ledger topics this code cannot resolve; refuse to go on when there are any.

    Counted: distinct topics in the events table that start with ``ledger.``, or are old
    topics registered for a renamed ``Operation`` event class, and do not resolve. A record
    whose topic resolves but whose ``class_version`` is newer than the code is not counted
    here (that needs every record decoded); the projection reports it as ``unreadable_event``.

    Reads the whole events table once (no index on topic).

    Args:
        app: the host application, on the store to check.
        allow_unreadable: go on anyway (``--allow-unreadable-events``); the topics are logged.

    Returns:
        The unresolvable topics and their record counts (empty when all resolve).

    Raises:
        UnreadableHistoryError: some topic does not resolve and ``allow_unreadable`` is False.
            A ``ConfigurationError``: the CLI prints it and exits with code 2.

    Source: issue 10 item 5.
    """
    current = set(ledger_topics())
    renamed = [topic for topic in read_topics() if topic not in current]
    unreadable = unresolvable_topics(stored_ledger_topics(app, renamed), renamed)
    if unreadable and not allow_unreadable:
        raise UnreadableHistoryError(unreadable)
    if unreadable:
        log.warning("starting with stored events this code cannot read; their operations wait on the "
                    "attention queue as unreadable_event", topics=unreadable)
    return unreadable
