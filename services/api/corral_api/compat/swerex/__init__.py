"""SWE-ReX's remote runtime (``swerex.runtime.remote.RemoteRuntime``) per sandbox, at
``/v1/sandboxes/{id}/swerex``: an adapter over the rollout step log and the data path."""
