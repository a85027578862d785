"""``opledger secret new``: print a fresh Standard Webhooks signing secret.

For ``OPLEDGER_WEBHOOK_SECRET`` (the webhook and ``lro`` adapters sign with it), a provider's
callback secret (``OPLEDGER_SECRET_CALLBACK_<INTEGRATION>``) and the reference partner's
``--secret``. Only the secret goes to standard output, so ``$(opledger secret new)`` can be
pasted into a shell line; ``--json`` prints it in an object. No store or setting is read.

Source: Standard Webhooks specification ("Signature scheme"); issue 34 item 2.
"""

from __future__ import annotations

import sys

import typer

from adapters.cli.common import JsonOption, print_json
from adapters.webhook.secret import DEFAULT_SECRET_BYTES, MAX_SECRET_BYTES, MIN_SECRET_BYTES, new_secret

secret_app = typer.Typer(help="Make signing secrets.", no_args_is_help=True)


@secret_app.command("new")
def new(
    size: int = typer.Option(DEFAULT_SECRET_BYTES, "--bytes", min=MIN_SECRET_BYTES, max=MAX_SECRET_BYTES,
                             help="random bytes in the secret (Standard Webhooks: 24 to 64)"),
    json_output: bool = JsonOption,
) -> None:
    """Print a fresh Standard Webhooks secret (whsec_ + base64 of random bytes).

    E.g. OPLEDGER_WEBHOOK_SECRET=$(opledger secret new). A new one every call: give it to both sides.
    \f

    Args:
        size: random bytes (``--bytes``), 24 to 64.
        json_output: print ``{"secret": ..., "bytes": ...}`` instead of the bare secret.

    Source: Standard Webhooks specification ("Signature scheme"); issue 34 item 2.
    """
    secret = new_secret(size)
    if json_output:
        print_json({"secret": secret, "bytes": size, "format": "standard-webhooks"})
        return
    sys.stdout.write(secret + "\n")  # bare: not through Rich, which could wrap or colour it
