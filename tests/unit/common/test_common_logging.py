"""Every log line is one JSON object with the logger's name, whether structlog or stdlib wrote it."""

import json
import logging

import pytest

from corral_common.logging import configure_logging, get_logger


@pytest.fixture
def json_logs(capsys):
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    # Other tests in this process (a uvicorn server started in-process) may have configured
    # uvicorn's loggers (own handlers, no propagation, disabled): start from stdlib defaults.
    saved = {}
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "aio_pika", "httpx"):
        lg = logging.getLogger(name)
        saved[name] = (lg.handlers[:], lg.level, lg.propagate, lg.disabled)
        lg.handlers[:], lg.level, lg.propagate, lg.disabled = [], logging.NOTSET, True, False
    configure_logging("test-service", "INFO", json=True)
    capsys.readouterr()

    def lines() -> list[dict]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines()]

    yield lines
    root.handlers[:], root.level = handlers, level
    for name, (hs, lvl, prop, dis) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:], lg.level, lg.propagate, lg.disabled = hs, lvl, prop, dis


def test_structlog_and_stdlib_lines_are_json_with_the_logger_name(json_logs):
    get_logger("corral_test.logging_module").info("sandbox.started", sandbox_id="sb-1", ms=1.5)
    # aio_pika logs messages with quotes in them: these made the old text template invalid JSON.
    logging.getLogger("aio_pika").warning('connection "amqp://x" lost: %s', "reset by 'peer'")
    logging.getLogger("uvicorn.error").info("Application startup complete.")
    get_logger("corral_test.logging_module").debug("below.the_level")
    logging.getLogger("httpx").debug("below the level too")
    lines = json_logs()
    assert [(line["logger"], line["event"], line["level"]) for line in lines] == [
        ("corral_test.logging_module", "sandbox.started", "info"),
        ("aio_pika", "connection \"amqp://x\" lost: reset by 'peer'", "warning"),
        ("uvicorn.error", "Application startup complete.", "info"),
    ]
    assert lines[0]["sandbox_id"] == "sb-1" and lines[0]["ms"] == 1.5
    assert all(line["service"] == "test-service" and line["timestamp"] for line in lines)


def test_exceptions_are_rendered_inside_the_json(json_logs):
    try:
        raise RuntimeError('a "quoted"\nmultiline failure')
    except RuntimeError:
        get_logger("corral_test.logging_module").exception("thing.failed", key="k")
        logging.getLogger("aio_pika").exception("stdlib failure")
    structlog_line, stdlib_line = json_logs()
    for line in (structlog_line, stdlib_line):
        assert "RuntimeError: a \"quoted\"\nmultiline failure" in line["exception"]
    assert (structlog_line["event"], structlog_line["key"], structlog_line["level"]) == ("thing.failed", "k", "error")
    assert (stdlib_line["logger"], stdlib_line["level"]) == ("aio_pika", "error")


def test_configuring_again_keeps_one_handler(json_logs):
    configure_logging("test-service", "INFO", json=True)
    logging.getLogger("aio_pika").warning("once")
    assert [line["event"] for line in json_logs()] == ["once"]
