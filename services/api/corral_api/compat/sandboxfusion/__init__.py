"""SandboxFusion's ``/run_code`` (and ``/v1/ping``), byte-compatible with upstream's JSON and
status rules: an adapter over the fncall service."""
