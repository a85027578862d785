"""How many egress calls a claim pass may take: the free slots, in all and per target host, and
the free egress threads for adapters that block (docs/adr/0009-egress-event-loop.md, step 2).

A due row does not say which adapter its operation needs, so the pass chooses rows by
:meth:`PassCapacity.room` and then, per loaded operation, takes a slot (and a thread when its
adapter blocks) with :meth:`PassCapacity.take`. A worker whose adapters all block chooses no more
rows than it has threads free; one whose adapters all run their own event loop as many as it
has slots free; a worker with both no more than its free threads, but at least
``MIXED_PASS_FLOOR``, so that busy threads never starve the calls that need none. Choosing more
rows than it can claim would load them for nothing and hold them from the other workers.

Source: DESIGN §7 (bounded per host); docs/adr/0002-executor-services.md ("Egress concurrency").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from uuid import UUID

from executors.egress import EgressService
from executors.flights import target_host
from ledger.egress import Adapter, starts_calls
from ledger.errors import LedgerError
from ledger.operation import Operation

MIXED_PASS_FLOOR = 32
"""Rows needing egress a pass of a worker with both kinds of adapter may choose when its
threads are all busy: the calls of its event-loop adapters still go out."""
MAX_REMEMBERED_HOSTS = 100_000
"""Operations whose target host was full when last seen, remembered so that they are not loaded
again while it stays full; past this many the memory starts over (it is only a saving)."""
_THREADS = "threads"
"""The key of a pass's per-host counts that counts its calls needing an egress thread (no
target host is spelt so: ``target_host`` gives ``scheme://host:port``)."""


class PassCapacity:
    """The egress room of one worker's claim passes.

    Args:
        egress: the worker's egress service (its free slots and threads).
        adapters: the worker's adapters.
        adapter_of: the adapter an operation's integration names; raises a ``LedgerError`` when
            this worker has none (the claim change then defers the operation).
    """

    def __init__(self, *, egress: EgressService, adapters: Iterable[Adapter],
                 adapter_of: Callable[[Operation], Adapter]) -> None:
        self.egress = egress
        self._adapter_of = adapter_of
        loops = {starts_calls(adapter) for adapter in adapters}
        # Rows a pass may choose beyond its free threads: None bounds them by the slots alone.
        self._beyond_threads = None if False not in loops else (MIXED_PASS_FLOOR if True in loops else 0)
        self._waiting_for_host: dict[UUID, str] = {}  # op -> its target host, full when last seen

    def room(self) -> int:
        """Rows needing egress a pass may choose now (see the module's docstring)."""
        free = self.egress.free_slots()
        if self._beyond_threads is None:
            return free
        return min(free, max(self.egress.free_threads(), self._beyond_threads))

    def host_full(self, op_id: UUID) -> bool:
        """Whether ``op_id``'s target host was full when last seen and still is."""
        host = self._waiting_for_host.get(op_id)
        return host is not None and self.egress.free_slots(host) <= 0

    def take(self, op: Operation, by_host: Counter[str]) -> bool:
        """Whether ``op``'s target host has a free egress slot this pass, and an egress thread
        when its adapter blocks, taking them in ``by_host`` (the pass's counts) if so; an
        operation refused for its host is remembered (:meth:`host_full`)."""
        threaded = self._blocks(op)
        if threaded and self.egress.free_threads() - by_host[_THREADS] <= 0:
            return False
        host = target_host(op.target)
        if host is not None:
            if self.egress.free_slots(host) - by_host[host] <= 0:
                if len(self._waiting_for_host) >= MAX_REMEMBERED_HOSTS:
                    self._waiting_for_host.clear()
                self._waiting_for_host[op.id] = host
                return False
            by_host[host] += 1
            self._waiting_for_host.pop(op.id, None)
        by_host[_THREADS] += threaded
        return True

    def _blocks(self, op: Operation) -> bool:
        """Whether ``op``'s adapter makes its calls on an egress thread (it has no event loop of
        its own: ``ledger.egress.StartsCalls``); False when this worker has none."""
        try:
            return not starts_calls(self._adapter_of(op))
        except LedgerError:
            return False
