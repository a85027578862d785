"""``python -m adapters.cli``: the same as the ``opledger`` console script."""

from adapters.cli.app import main

main()
