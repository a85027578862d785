"""Stored topics and the code that reads them: registered renames, and topics that do not resolve.

A record names its event class by topic (``module:Qualname``). When a class, its aggregate or its
module is renamed, its old records keep the old topic; ``eventsourcing.utils.register_topic(old,
obj)`` tells the library's ``resolve_topic`` where it went, for one class (``"old.mod:Operation.
Claimed"``), an enclosing class (``"old.mod:Operation"``) or a module or package (``"old.mod"``).
Readers that select records by topic must ask for the old topics too, or they read nothing of
those records: :func:`topics_of` lists every topic that resolves to the given classes.

Source: issue 10 item 5 ("history the code cannot read"); eventsourcing 9.5 ``utils``.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterable, Mapping

from eventsourcing.utils import TopicError, get_topic, resolve_topic

from ledger.codec import LEDGER_TOPIC_PREFIX

__all__ = ["topics_of", "unresolvable_topics"]

_memo_lock = threading.Lock()
_memo: dict[tuple[type, ...], tuple[int, tuple[str, ...]]] = {}


def _registry() -> Mapping[str, object]:
    # The library keeps registered topics in a private dict and offers no way to list them;
    # this is the one place opledger reads it (a copy, taken under the library's own lock).
    from eventsourcing import utils

    with utils._topic_cache_lock:
        return dict(utils._topic_cache)


def topics_of(classes: Iterable[type]) -> tuple[str, ...]:
    """Return every topic that resolves to one of ``classes``: each class's current topic first,
    then the old topics registered for it (or for its enclosing class or module).

    Cached until another topic is registered (the library's registry only grows, except when
    a test clears it).

    Args:
        classes: event classes, e.g. every ``Operation`` event class.

    Returns:
        Distinct topics; the current ones in the order of ``classes``.

    Source: eventsourcing 9.5 ``utils.register_topic`` / ``resolve_topic``.
    """
    key = tuple(classes)
    registry = _registry()
    with _memo_lock:
        found = _memo.get(key)
    if found is not None and found[0] == len(registry):
        return found[1]
    topics = dict.fromkeys(get_topic(cls) for cls in key)
    for candidate in _candidates(key, registry):
        if candidate not in topics and _resolves_to(candidate, key):
            topics[candidate] = None
    result = tuple(topics)
    with _memo_lock:
        # The length after resolving: ``resolve_topic`` registers what it resolved.
        _memo[key] = (len(_registry()), result)
    return result


def _candidates(classes: tuple[type, ...], registry: Mapping[str, object]) -> Iterable[str]:
    """Old topics the registered entries imply for ``classes`` (checked by the caller)."""
    for registered, obj in registry.items():
        module, _, attrs = registered.partition(":")
        for cls in classes:
            qualname = cls.__qualname__
            if obj is cls:
                yield registered
            elif isinstance(obj, type) and attrs and obj.__module__ == cls.__module__ \
                    and qualname.startswith(obj.__qualname__ + "."):
                yield registered + qualname[len(obj.__qualname__):]
            elif isinstance(obj, types.ModuleType) and not attrs:
                if obj.__name__ == cls.__module__:
                    yield f"{module}:{qualname}"
                elif cls.__module__.startswith(obj.__name__ + "."):
                    yield f"{module}{cls.__module__[len(obj.__name__):]}:{qualname}"


def _resolves_to(topic: str, classes: tuple[type, ...]) -> bool:
    try:
        return resolve_topic(topic) in classes
    except (TopicError, ImportError, AttributeError, ValueError):
        return False


def unresolvable_topics(stored: Mapping[str, int], renamed: Iterable[str] = ()) -> dict[str, int]:
    """Return the stored ledger topics this code cannot resolve, with their record counts.

    Args:
        stored: distinct stored topics and how many records each has.
        renamed: registered old topics of ledger classes (:func:`topics_of`), checked too.

    Returns:
        The topics starting with ``ledger.`` (or in ``renamed``) that do not resolve to a class.

    Source: issue 10 item 5 (``migrate`` and the worker's start count them).
    """
    wanted = set(renamed)
    unreadable: dict[str, int] = {}
    for topic, count in stored.items():
        if not (topic.startswith(LEDGER_TOPIC_PREFIX) or topic in wanted):
            continue
        try:
            resolved = resolve_topic(topic)
        except (TopicError, ImportError, AttributeError, ValueError):
            unreadable[topic] = count
            continue
        if not isinstance(resolved, type):
            unreadable[topic] = count
    return unreadable
