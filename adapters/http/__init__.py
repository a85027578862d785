"""The HTTP edge (``opledger serve``): one FastAPI app with routers for health, ``/metrics``, the
read-only observe API and operator actions, and the operator console (DESIGN §9)."""

from adapters.http.app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app"]
