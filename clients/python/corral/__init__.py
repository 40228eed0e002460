"""Corral Python SDK.

A small hand-written layer over ``corral_client`` (generated from the api's OpenAPI
document by openapi-python-client; regenerate with ``make client``).
"""

from corral.aio import AsyncCorral, AsyncSandbox
from corral.client import Corral, Sandbox
from corral.errors import CorralError, SandboxFailed

__all__ = ["AsyncCorral", "AsyncSandbox", "Corral", "CorralError", "Sandbox", "SandboxFailed"]
