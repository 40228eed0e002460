"""E2B's way to a sandbox port other than envd's (49983) and the code interpreter's (49999):
the ``E2b-Sandbox-Port: N`` header on a request to the shared URL (E2B's edge proxy reads it
when the Host is an IP or localhost). This middleware moves such requests under
``/e2b-ingress/{port}`` so the route below handles them, whatever their path; the route sends
them to the sandbox's port through Corral's port ingress, authenticated by the sandbox's
traffic (or access) token."""

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

SERVED_HERE = frozenset({"49983", "49999"})
PREFIX = "/e2b-ingress"


class E2bPortRouting:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = Headers(scope=scope)
            port = headers.get("e2b-sandbox-port")
            if port and port not in SERVED_HERE and headers.get("e2b-sandbox-id"):
                path = f"{PREFIX}/{port}{scope['path']}"
                scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)
