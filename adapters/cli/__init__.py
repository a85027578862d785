"""The ``opledger`` command line (Typer + Rich). Wires ledger, executors, projections and
adapters together (DESIGN §2, §9). Every user mistake ends in a one-line error and exit code 2,
never a traceback.
"""

from adapters.cli.app import app, main

__all__ = ["app", "main"]
