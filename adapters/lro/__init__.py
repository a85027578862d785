"""The long-running-operation adapter (AIP-151 shape): create, poll, cancel (DESIGN §2).

Two concerns, one module each: :mod:`~adapters.lro.adapter` (the I/O, on the webhook adapter's
signed transport) and :mod:`~adapters.lro.classify` (the pure decisions).

Source: AIP-151; issue 12 item 1.
"""

from adapters.lro.adapter import CANCEL_SUFFIX, LroAdapter
from adapters.lro.classify import CODE_CANCELLED, classify_cancel, classify_create, classify_poll, operation_name_of

__all__ = [
    # the adapter
    "LroAdapter",
    "CANCEL_SUFFIX",
    # classification (pure)
    "classify_create",
    "classify_poll",
    "classify_cancel",
    "operation_name_of",
    "CODE_CANCELLED",
]
