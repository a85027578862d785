"""The outbound HTTP webhook adapter (DESIGN §5).

Four concerns, one module each: :mod:`~adapters.webhook.adapter` (the I/O),
:mod:`~adapters.webhook.classify` (the pure decision), :mod:`~adapters.webhook.excerpt`
(bounded, redacted text for storage) and :mod:`~adapters.webhook.secret` (the signing secret's
format, and a fresh one).

Source: DESIGN §5; Standard Webhooks specification.
"""

from adapters.webhook.adapter import (
    DEFAULT_LOOKUP_PATH,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_USER_AGENT,
    REDIRECT_SAFE_MODES,
    WebhookAdapter,
    WebhookConfig,
)
from adapters.webhook.classify import (
    DEFAULT_MAX_RETRY_AFTER_SECONDS,
    MAX_REDIRECTS,
    HttpExchange,
    TransportFailure,
    classify,
    classify_lookup,
    parse_retry_after,
    remote_id_of,
)
from adapters.webhook.excerpt import DEFAULT_EXCERPT_CHARS, excerpt, redact, secrets_of, visible_text
from adapters.webhook.secret import MAKE_SECRET, new_secret, secret_problem
from adapters.webhook.transport import failure_of
from ledger.redaction import REDACTED

__all__ = [
    # the adapter
    "WebhookAdapter",
    "WebhookConfig",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_LOOKUP_PATH",
    "DEFAULT_USER_AGENT",
    "REDIRECT_SAFE_MODES",
    # classification (pure)
    "HttpExchange",
    "TransportFailure",
    "classify",
    "classify_lookup",
    "failure_of",
    "parse_retry_after",
    "remote_id_of",
    "DEFAULT_MAX_RETRY_AFTER_SECONDS",
    "MAX_REDIRECTS",
    # signing secrets (``opledger secret new``)
    "new_secret",
    "secret_problem",
    "MAKE_SECRET",
    # excerpts and redaction (pure)
    "excerpt",
    "redact",
    "secrets_of",
    "visible_text",
    "DEFAULT_EXCERPT_CHARS",
    "REDACTED",
]
