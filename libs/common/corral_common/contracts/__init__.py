"""Wire contracts: the messages one Corral service sends and another reads, and the typed
clients that carry them, defined once: the sandbox spec, states and usage (``sandboxes``),
events on the bus (``events``), exec and files (``exec``), screens, input and snapshots
(``display``), egress policy (``network``), the node-agent's HTTP API (``node``,
``node_client``), image-service (``images``), fncall (``fncall``) and memory (``memory``).

Both sides import the same models, so renaming a field or a verdict is one edit and the
tests of both services see it. A contract changes compatibly: fields are added with defaults
(an older peer still parses the message) and never renamed in place.
"""
