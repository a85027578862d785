"""``python -m adapters.partner --host H --port P --log FILE [--secret S]``."""

from adapters.partner.server import main

raise SystemExit(main())
