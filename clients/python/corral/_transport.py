"""One definition of each SDK call, run by a sync and by an async transport.

The sync and the async SDK used to be hand copies that drifted apart. Now an SDK method is
written once, as an *operation*: a generator that yields what it needs done and returns its
result. It may yield

- a ``Call`` (``corral._calls``): one HTTP request; the yield gives back its parsed answer, or
  raises its ``CorralError`` / ``httpx.TransportError`` at the yield;
- ``Sleep(seconds)``;
- ``Concurrently(ops, limit)``: run several operations (or calls) with at most ``limit`` in
  flight; the yield gives back their results in order.

An operation that needs no more than one call may just return the ``Call``; one that reuses
another yields from it (``yield from sandbox._wait(...)``). ``SyncTransport`` runs operations
with blocking httpx, ``time.sleep`` and threads; ``AsyncTransport`` with awaits,
``asyncio.sleep`` and ``asyncio.gather``. Neither knows any endpoint.

``Flavored`` turns the operations of a shared class into methods: a subclass declared with
``flavor="sync"`` gets plain methods, one declared with ``flavor="async"`` gets ``async def``
methods (async generators for ``@streaming`` ones), with the operation's name, signature and
docstring. ``Sandbox`` and ``AsyncSandbox`` are two such subclasses of one class, so they
cannot differ in what they send, what they accept or what they raise;
``tests/unit/sdk/test_sdk_surface.py`` checks that every pair matches.
"""

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TypeVar, get_args, get_origin

import httpx

from corral._calls import Call
from corral.errors import raise_for

T = TypeVar("T")


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Concurrently:
    """Run ``ops`` (operations or calls) with at most ``limit`` (at least 1) in flight."""

    ops: Sequence[Any]
    limit: int


Step = Call[Any] | Sleep | Concurrently
Op = Generator[Step, Any, T]
"""An operation returning T (see the module docstring)."""


def _resume(op: Op[Any], value: Any, error: Exception | None) -> tuple[bool, Any]:
    """Hand ``op`` the outcome of its last step: (False, its next step) or (True, its result)."""
    try:
        return False, op.send(value) if error is None else op.throw(error)
    except StopIteration as stop:
        return True, stop.value


class SyncTransport:
    def __init__(self, http: Callable[[], httpx.Client]):
        self._http = http  # asked on each call: the generated client makes its httpx client on first use

    def run(self, op: "Op[T] | Call[T]") -> T:
        if isinstance(op, Call):
            return self._send(op)
        with closing(op):  # an abandoned operation (Ctrl-C) runs its finally blocks now
            finished, step = _resume(op, None, None)
            while not finished:
                try:
                    value, error = self._do(step), None
                except Exception as exc:  # noqa: BLE001 - handed to the operation at its yield
                    value, error = None, exc
                finished, step = _resume(op, value, error)
            return step

    def stream(self, call: Call[T]) -> Iterator[T]:
        """One parsed item per non-empty line of the answer, read as it arrives."""
        with self._http().stream(call.method, call.url, **call.request_args()) as response:
            if response.status_code >= 400:
                raise_for(response.status_code, response.read())
            for line in response.iter_lines():
                if line:
                    yield call.parse(line)

    def _send(self, call: Call[T]) -> T:
        return call.result(self._http().request(call.method, call.url, **call.request_args()))

    def _do(self, step: Step) -> Any:
        if isinstance(step, Call):
            return self._send(step)
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, Concurrently):
            if not step.ops:
                return []
            self._http()  # made now, not by two threads at once
            with ThreadPoolExecutor(max_workers=max(1, min(step.limit, len(step.ops)))) as pool:
                return list(pool.map(self.run, step.ops))
        raise TypeError(f"an operation yielded {step!r}")


class AsyncTransport:
    def __init__(self, http: Callable[[], httpx.AsyncClient]):
        self._http = http

    async def run(self, op: "Op[T] | Call[T]") -> T:
        if isinstance(op, Call):
            return await self._send(op)
        with closing(op):
            finished, step = _resume(op, None, None)
            while not finished:
                try:
                    value, error = await self._do(step), None
                except Exception as exc:  # noqa: BLE001 - handed to the operation at its yield
                    value, error = None, exc
                finished, step = _resume(op, value, error)
            return step

    async def stream(self, call: Call[T]) -> AsyncIterator[T]:
        async with self._http().stream(call.method, call.url, **call.request_args()) as response:
            if response.status_code >= 400:
                raise_for(response.status_code, await response.aread())
            async for line in response.aiter_lines():
                if line:
                    yield call.parse(line)

    async def _send(self, call: Call[T]) -> T:
        return call.result(await self._http().request(call.method, call.url, **call.request_args()))

    async def _do(self, step: Step) -> Any:
        if isinstance(step, Call):
            return await self._send(step)
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, Concurrently):
            gate = asyncio.Semaphore(max(1, step.limit))

            async def one(op: Any) -> Any:
                async with gate:
                    return await self.run(op)

            return list(await asyncio.gather(*(one(op) for op in step.ops)))
        raise TypeError(f"an operation yielded {step!r}")


# ---- operations -> methods -------------------------------------------------------------------

class _Operation:
    def __init__(self, fn: Callable[..., Any], streams: bool):
        self.fn = fn
        self.streams = streams


def operation(fn: Callable[..., Any]) -> Any:
    """Mark a generator method (or one returning a ``Call``) as an SDK method of both flavours."""
    return _Operation(fn, streams=False)


def streaming(fn: Callable[..., Call[Any]]) -> Any:
    """Mark a method returning a streaming ``Call``: an iterator (sync) / async iterator of its items."""
    return _Operation(fn, streams=True)


def _sync_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._transport.run(fn(self, *args, **kwargs))
    return method


def _async_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._transport.run(fn(self, *args, **kwargs))
    return method


def _sync_stream(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from self._transport.stream(fn(self, *args, **kwargs))
    return method


def _async_stream(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def method(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for item in self._transport.stream(fn(self, *args, **kwargs)):
            yield item
    return method


_MAKERS = {("sync", False): _sync_method, ("async", False): _async_method,
           ("sync", True): _sync_stream, ("async", True): _async_stream}


def _returns(annotation: Any, flavor: str, streams: bool) -> Any:
    """What the method gives (awaited, for async): T for ``Op[T]`` and ``Call[T]``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Call:
        result = args[0]
    elif origin is Generator:
        result = args[2]
    else:
        return annotation
    return (Iterator if flavor == "sync" else AsyncIterator)[result] if streams else result


def _method(name: str, owner: type, op: _Operation, flavor: str) -> Callable[..., Any]:
    method = _MAKERS[flavor, op.streams](op.fn)
    functools.update_wrapper(method, op.fn)
    method.__name__, method.__qualname__ = name, f"{owner.__qualname__}.{name}"
    signature = inspect.signature(op.fn)
    method.__signature__ = signature.replace(
        return_annotation=_returns(signature.return_annotation, flavor, op.streams))
    return method


class Flavored:
    """Base of the SDK classes; ``self._corral`` (a Corral or AsyncCorral) carries the transport."""

    def __init__(self, corral: Any):
        self._corral = corral

    @property
    def _transport(self) -> Any:
        return self._corral._transport

    def __init_subclass__(cls, flavor: str | None = None, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if flavor is None:  # a shared class, or a user's subclass of a flavoured one
            return
        for name in dir(cls):
            member = inspect.getattr_static(cls, name)
            if isinstance(member, _Operation):
                setattr(cls, name, _method(name, cls, member, flavor))
