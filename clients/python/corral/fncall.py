"""Stateless code execution (``/v1/fncall``): ``corral.fncall(...)`` and ``await corral.fncall_many(...)``.

    import corral

    r = corral.fncall("python", "print(int(input()) * 2)", tests=[{"stdin": "21", "expected_stdout": "42\\n"}])
    r["verdict"]                     # "accepted"

    results = await corral.fncall_many([{"runtime": "cpp", "code": src, "tests": cases}, ...], concurrency=64)

URL and key come from the arguments, a ``Corral``/``AsyncCorral`` client (``client=``), or
``CORRAL_URL`` / ``CORRAL_API_KEY``. Results are plain dicts shaped like the api's
``FncallResponse`` (verdict, compile, cases[{verdict, exit_code, stdout, stderr, time_ms,
memory_kb}], ...). ``fncall_many(..., batch=True)`` sends one ``/v1/fncall/batch`` request
instead of one request per call and waits for all of it.
"""

from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from corral import _calls
from corral._common import resolve
from corral._transport import AsyncTransport, Concurrently, Op, SyncTransport
from corral.errors import CorralError

__all__ = ["fncall", "fncall_many", "fncall_body"]

_BATCH_SIZE = 10_000  # the api's most calls per /v1/fncall/batch request and per result page


def fncall_body(runtime: str, code: str, *, tests: Iterable[Mapping[str, Any]] | None = None,
                stdin: str | None = None, files: Mapping[str, str] | None = None, time_limit_ms: int = 2000,
                memory_limit_mb: int = 256, output_limit_kb: int = 1024, compare: str = "exact",
                stop_on_failure: bool = False) -> dict[str, Any]:
    """The JSON body of one call (``files`` values are base64)."""
    body: dict[str, Any] = {"runtime": runtime, "code": code, "time_limit_ms": time_limit_ms,
                            "memory_limit_mb": memory_limit_mb, "output_limit_kb": output_limit_kb,
                            "compare": compare, "stop_on_failure": stop_on_failure, "files": dict(files or {})}
    if tests is not None:
        body["tests"] = [dict(t) for t in tests]
    if stdin is not None:
        body["stdin"] = stdin
    return body


def _target(client: Any, url: str | None, api_key: str | None) -> tuple[str, str]:
    if client is not None:  # a Corral / AsyncCorral: reuse its URL and key
        api = client.api
        return str(api._base_url).rstrip("/"), api.token
    return resolve(url, api_key)


def fncall(runtime: str, code: str, *, tests: Iterable[Mapping[str, Any]] | None = None, stdin: str | None = None,
           files: Mapping[str, str] | None = None, time_limit_ms: int = 2000, memory_limit_mb: int = 256,
           output_limit_kb: int = 1024, compare: str = "exact", stop_on_failure: bool = False,
           url: str | None = None, api_key: str | None = None, client: Any = None,
           timeout: float = 600.0) -> dict[str, Any]:
    """Run ``code`` once per test case (compiled once) in fresh isolated sandboxes and judge it."""
    base, key = _target(client, url, api_key)
    body = fncall_body(runtime, code, tests=tests, stdin=stdin, files=files, time_limit_ms=time_limit_ms,
                       memory_limit_mb=memory_limit_mb, output_limit_kb=output_limit_kb, compare=compare,
                       stop_on_failure=stop_on_failure)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"},
                      timeout=httpx.Timeout(timeout, connect=10.0)) as http:
        return SyncTransport(lambda: http).run(_calls.fncall(body))


async def fncall_many(calls: Iterable[Mapping[str, Any]], *, concurrency: int = 32, batch: bool = False,
                      url: str | None = None, api_key: str | None = None, client: Any = None,
                      timeout: float = 3600.0) -> list[dict[str, Any]]:
    """Run many calls; results in the order of ``calls``.

    Each call is a dict of ``fncall`` keyword arguments (``runtime``, ``code``, ``tests``...).
    At most ``concurrency`` requests are in flight, spread over ``concurrency`` connections.
    With ``batch=True`` the calls go in ``/v1/fncall/batch`` requests of up to 10,000 and the
    api runs them (its own bound on calls in flight).
    """
    base, key = _target(client, url, api_key)
    bodies = [fncall_body(**call) for call in calls]
    if not bodies:
        return []
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=max(1, concurrency), max_keepalive_connections=max(1, concurrency))
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(timeout, connect=10.0)) as http:
        return await AsyncTransport(lambda: http).run(_many(bodies, concurrency, batch, timeout))


def _many(bodies: list[dict[str, Any]], concurrency: int, batch: bool, timeout: float) -> Op[list[dict[str, Any]]]:
    if not batch:
        return (yield Concurrently([_calls.fncall(body) for body in bodies], concurrency))
    results: list[dict[str, Any] | None] = [None] * len(bodies)
    for start in range(0, len(bodies), _BATCH_SIZE):
        chunk = bodies[start:start + _BATCH_SIZE]
        batch_id, offset = (yield _calls.create_fncall_batch(chunk))["id"], 0
        while offset < len(chunk):
            page = yield _calls.get_fncall_batch(batch_id, offset=offset, limit=_BATCH_SIZE, timeout=min(timeout, 3600))
            for item in page["results"]:
                results[start + item["index"]] = item["result"]
            offset = page["next_offset"]
            if page["status"] != "done" and not page["results"]:
                raise CorralError(504, "timeout", f"batch {batch_id} did not finish within {timeout}s")
    return [r for r in results if r is not None]
