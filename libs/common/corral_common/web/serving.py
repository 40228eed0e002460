"""How every Corral service serves HTTP: uvicorn with the same defaults everywhere."""

from typing import Any

from corral_common.settings import HTTP_KEEP_ALIVE_S

# How long a stopping service lets requests in flight finish before it closes them. Unbounded
# (uvicorn's default), one long-poll or a 1-hour exec held a stopping service for as long as it
# ran: a restart, a deploy or a test's teardown waited on the slowest client. What is cut off is
# a request, never state: sandboxes outlive their node-agent (they are adopted on start), and
# every record a request writes is written before it answers.
GRACEFUL_SHUTDOWN_S = 10


def serve(app: Any, *, host: str, port: int, log_level: str = "info", **options: Any) -> None:
    """Serve ``app`` until SIGTERM/SIGINT. ``log_config=None``: uvicorn's own lines go through
    configure_logging's formatter like the service's."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_config=None, log_level=log_level.lower(), access_log=False,
                timeout_keep_alive=HTTP_KEEP_ALIVE_S, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, **options)
