"""The edges of opledger: outbound provider adapters, inbound HTTP, the reference partner.

Modules are imported directly (``adapters.webhook``, ``adapters.fake``, ``adapters.partner``) so
that importing the package stays cheap and pulls in no HTTP stack. The CLI is not exported here.
Source: DESIGN §2 (layout), STYLE rule 3 (dependencies point inward).
"""
