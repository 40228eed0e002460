"""How every service speaks HTTP: the one error shape (``errors``: types only), what installs it
(``handlers``, on ``guards`` and the ``overload`` table), the internal token (``internal``),
``/metrics`` (``metrics``), uvicorn's settings (``serving``) and the WebSocket relay
(``ws_relay``). ``handlers`` imports the others; none of them imports ``handlers``."""
