"""The ``Operation`` aggregate's events, one module per concern, each nested in
``ledger.operation.Operation`` under its stored topic (``ledger.events.base.stored_as``): records
written before the split load unchanged. Each ``apply`` only assigns (STYLE rule 1).
Source: docs/adr/0001-operation-lifecycle.md.
"""
