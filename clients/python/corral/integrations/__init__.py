"""Plugins that let agent frameworks use Corral sandboxes through their own extension points,
each a thin layer over the SDK (``corral.Corral`` / ``corral.AsyncCorral``):

- ``corral.integrations.mini_swe_agent.CorralEnvironment``: mini-swe-agent's
  ``environment_class: corral.integrations.mini_swe_agent.CorralEnvironment``;
- ``corral.integrations.inspect_ai``: inspect_ai's sandbox provider ``corral``
  (``inspect eval --sandbox corral``), registered by the ``inspect_ai`` entry point.

Where a framework names a container image (a compose file, a Dockerfile), ``environment_for``
maps it to a Corral environment: ``CORRAL_IMAGE_MAP`` (JSON ``{"image": "environment"}``) first,
else the image's repository name without registry or tag. The API endpoint and key come from
``CORRAL_URL`` / ``CORRAL_API_KEY`` unless given.
"""

import json
import os

DEFAULT_ENVIRONMENT = "judge"


def environment_for(image: str | None) -> str:
    """The Corral environment for a container image name (None: ``CORRAL_ENVIRONMENT`` or judge)."""
    if not image:
        return os.environ.get("CORRAL_ENVIRONMENT", DEFAULT_ENVIRONMENT)
    mapping = json.loads(os.environ.get("CORRAL_IMAGE_MAP", "{}") or "{}")
    if image in mapping:
        return mapping[image]
    name = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    return mapping.get(name, name)
