"""The reference partner server used by the demo and the tests (DESIGN §2).

A real HTTP server standing in for a provider: it verifies Standard Webhooks signatures, applies
each effect once per ``Idempotency-Key``, answers ``GET /idempotency/{key}``, injects faults on
demand and keeps a durable log of every request it receives.

Four concerns, one module each: :mod:`.server` (HTTP), :mod:`.faults` (what to do wrong),
:mod:`.store` (the durable log and effects), :mod:`.process` (running it as a child process).

Source: DESIGN §5; Standard Webhooks specification.
"""

from adapters.partner.faults import FAULT_HEADER, ApplyTiming, Fault, FaultError, HostileBody
from adapters.partner.process import PartnerProcess, PartnerStartError, start_partner_process
from adapters.partner.server import SECRET_ENV, PartnerServer, main, make_server, serve
from adapters.partner.store import PartnerLog, PartnerRequest, StoredResponse

__all__ = [
    # running it
    "serve",
    "main",
    "make_server",
    "PartnerServer",
    "start_partner_process",
    "PartnerProcess",
    "PartnerStartError",
    "SECRET_ENV",
    # reading what it did
    "PartnerLog",
    "PartnerRequest",
    "StoredResponse",
    # faults
    "Fault",
    "FaultError",
    "ApplyTiming",
    "HostileBody",
    "FAULT_HEADER",
]
