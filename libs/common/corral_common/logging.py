"""Structured logs for every service: one JSON object per line, whoever logs it.

structlog loggers (``get_logger(__name__)``) and stdlib loggers (aio_pika, uvicorn, httpx...)
end in the same handler, whose ``structlog.stdlib.ProcessorFormatter`` renders both: a stdlib
message becomes the ``event`` of a JSON object instead of text pasted into a JSON template
(a message with a quote in it used to make the line invalid JSON). Every line carries
``logger`` (the module's name for our own code), ``level``, ``timestamp`` and the ``service``
bound at start. Event names are ``noun.verb`` (``sandbox.started``, ``layer.umount_failed``),
with the details as keys, never in the text.
"""

import logging
import sys

import structlog

# Added before either kind of record is rendered.
_SHARED_PROCESSORS = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record, not at set-up (pytest,
    for one, swaps it per test)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure_logging(service: str, level: str = "INFO", json: bool = True) -> None:
    """Route structlog and stdlib logging to stderr through one formatter; safe to call again."""
    numeric_level = logging.getLevelName(level.upper())
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*_SHARED_PROCESSORS, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        # Drops calls below the level before any processor runs (debug logs stay nearly free).
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    handler = _CurrentStderrHandler()
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED_PROCESSORS,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    ))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _CurrentStderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric_level)


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    """The logger of a module: ``get_logger(__name__)``."""
    return structlog.get_logger(name)
