"""Corral Python SDK.

A small hand-written layer over ``corral_client`` (generated from the api's OpenAPI
document by openapi-python-client; regenerate with ``make client``): it sends through the
generated ``AuthenticatedClient`` and answers with the generated models.

``Corral`` (client.py) and ``AsyncCorral`` (aio.py) have one definition: each HTTP call is a
builder in ``_calls.py``, each SDK method an operation over those calls (sandboxes.py,
jobs.py, rollouts.py, snapshots.py, fncall.py), run by the sync or the async transport in
``_transport.py``. Errors are mapped once, by ``errors.raise_for``.
"""

from corral._common import click_event, key_event, move_event, text_event
from corral.aio import AsyncCorral, AsyncSandbox
from corral.client import Corral, Sandbox
from corral.errors import CorralError, SandboxFailed
from corral.fncall import fncall, fncall_many
from corral.rollouts import AsyncRollout, Rollout, StepFailed, StepInterrupted, StepResult

__all__ = ["AsyncCorral", "AsyncRollout", "AsyncSandbox", "Corral", "CorralError", "Rollout", "Sandbox", "SandboxFailed",
           "StepFailed", "StepInterrupted", "StepResult", "click_event", "fncall", "fncall_many", "key_event",
           "move_event", "text_event"]
