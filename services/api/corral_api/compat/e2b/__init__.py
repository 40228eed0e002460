"""E2B-compatible surface for the unchanged ``e2b`` / ``e2b-code-interpreter`` SDKs.

Point the SDK at the api (both planes on one URL; the SDK's headers tell sandboxes apart)::

    E2B_API_URL=http://<api> E2B_SANDBOX_URL=http://<api> E2B_API_KEY=<a Corral API key>

- control plane (``router.py``, ``service.py``): ``/sandboxes``, ``/v2/sandboxes``: create,
  connect/resume, get, list, kill, timeout (with a deadline reaper), pause; authenticated by
  ``X-API-Key`` like every other route;
- envd data plane (``envd_router.py``, ``envd.py``, ``processes.py``): ``/health``, ``/files``
  and the Connect-RPC services ``process.Process`` / ``filesystem.Filesystem`` (``connect.py``
  is the JSON codec), routed by the ``E2b-Sandbox-Id`` header and authenticated by the
  sandbox's ``X-Access-Token`` (issued at create, returned on connect).

The wire specification it follows is docs/compat-e2b.md.
"""
