"""How routes and middleware reach the app's objects: one typed container per app, built by the
composition root (``corral_api.services.build_services``) and kept on ``app.state.services`` (the
app's only state besides its settings, which the shared plumbing in corral_common reads).

A route takes an object by its type: ``Annotated[SandboxService, Depends(provide(SandboxService))]``.
A domain thereby depends only on the types it uses, never on the container's module (which imports
every domain), so the domains keep their one-way layering (tests/unit/api/test_api_layers.py); and
the app checks at start-up that its container holds every type a route asks for."""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from functools import cache
from typing import Any, TypeVar, cast, get_type_hints

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

T = TypeVar("T")


class Container:
    """Objects by the type they are declared as, one of each. A dataclass subclass (the app's
    ``Services``) registers its fields by their annotations; ``Container.of`` takes a mapping
    (a test's few objects)."""

    _by_type: dict[type, object]

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        self._index([(hints[f.name], getattr(self, f.name)) for f in fields(cast(Any, self))])

    def _index(self, parts: Iterable[tuple[type, object]]) -> None:
        self._by_type = {}
        for kind, value in parts:
            if not isinstance(kind, type):
                raise TypeError(f"a container's part is declared by a class, not {kind!r}")
            if kind in self._by_type:
                raise TypeError(f"two parts of type {kind.__name__}: a route could not tell them apart")
            self._by_type[kind] = value

    @classmethod
    def of(cls, parts: Mapping[type, object]) -> "Container":
        container = cls.__new__(cls)
        Container._index(container, parts.items())
        return container

    def get(self, kind: type[T]) -> T:
        try:
            return cast(T, self._by_type[kind])
        except KeyError:
            raise LookupError(f"this app was built without a {kind.__name__}") from None

    def has(self, kind: type) -> bool:
        return kind in self._by_type


def container_of(app: ASGIApp | FastAPI) -> Container | None:
    """The app's container; None before its lifespan built it."""
    state = getattr(app, "state", None)
    services = getattr(state, "services", None) if state is not None else None
    return services if isinstance(services, Container) else None


def service_of(conn: HTTPConnection, kind: type[T]) -> T:
    """The app's object of ``kind``, for code a route calls with its request (a route itself
    takes it as a dependency: ``provide``)."""
    container = container_of(conn.app)
    if container is None:
        raise LookupError("the app's services are not built yet (its lifespan has not run)")
    return container.get(kind)


class Provider:
    """The dependency that hands a route the app's object of ``kind``."""

    def __init__(self, kind: type):
        self.kind = kind
        self.__name__ = f"provide_{kind.__name__}"

    async def __call__(self, conn: HTTPConnection) -> Any:
        return service_of(conn, self.kind)


@cache
def provide(kind: type[T]) -> Callable[[HTTPConnection], Any]:
    """One provider per type, so a test may replace it (``app.dependency_overrides[provide(X)]``)."""
    return Provider(kind)


def _provided(dependant: Dependant) -> Iterable[type]:
    if isinstance(dependant.call, Provider):
        yield dependant.call.kind
    for sub in dependant.dependencies:
        yield from _provided(sub)


def _routes(routes: Iterable[BaseRoute]) -> Iterable[BaseRoute]:
    for route in routes:
        included = getattr(route, "original_router", None)  # an included router (FastAPI keeps it whole)
        yield from _routes(included.routes) if included is not None else (route,)


def required_types(app: FastAPI) -> set[type]:
    """Every type a route of ``app`` takes through ``provide``."""
    wanted: set[type] = set()
    for route in _routes(app.router.routes):
        dependant = getattr(route, "dependant", None)
        if isinstance(dependant, Dependant):
            wanted.update(_provided(dependant))
    return wanted


def check_complete(app: FastAPI, container: Container) -> None:
    """Refuse to start an app whose container lacks a type one of its routes asks for: a wiring
    mistake is found at start-up, not by the first request that meets it."""
    missing = sorted(kind.__name__ for kind in required_types(app) if not container.has(kind))
    if missing:
        raise LookupError(f"the app's container has no {', '.join(missing)}, which its routes take")
