"""The ``Operation`` aggregate's events, one module per concern, each nested in
``ledger.operation.Operation`` under its stored topic (``ledger.events.base.stored_as``)."""
