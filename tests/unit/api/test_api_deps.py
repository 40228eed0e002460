"""The api's typed container (corral_api.deps, corral_api.services): routes take its parts by
type; a type no part has is found when the app starts, not by the first request that needs it."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, get_type_hints

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

import corral_api
from corral_api.app import create_app
from corral_api.deps import Container, check_complete, provide, required_types
from corral_api.services import Services
from corral_api.settings import ApiSettings


class Clock:
    def now(self) -> int:
        return 42


class Ledger:
    pass


@dataclass
class Parts(Container):
    clock: Clock


def app_taking(kind: type) -> FastAPI:
    app = FastAPI()

    @app.get("/t")
    async def route(part: Annotated[kind, Depends(provide(kind))]) -> dict:  # type: ignore[valid-type]
        return {"type": type(part).__name__}

    return app


def test_a_route_gets_the_part_of_the_type_it_asks_for():
    app = app_taking(Clock)
    app.state.services = Parts(clock=Clock())
    check_complete(app, app.state.services)
    with TestClient(app) as client:
        assert client.get("/t").json() == {"type": "Clock"}


def test_an_app_whose_container_lacks_a_type_a_route_takes_does_not_start():
    with pytest.raises(LookupError, match="Ledger"):
        check_complete(app_taking(Ledger), Parts(clock=Clock()))


def test_two_parts_of_one_type_are_refused():
    @dataclass
    class Twice(Container):
        one: Clock
        two: Clock

    with pytest.raises(TypeError, match="two parts of type Clock"):
        Twice(one=Clock(), two=Clock())


def test_the_api_container_holds_every_type_its_routes_take():
    wanted = required_types(create_app(ApiSettings()))
    assert len(wanted) > 10  # the routes are seen through the included routers
    assert wanted <= set(get_type_hints(Services).values())


def test_no_module_reads_the_app_state_but_the_composition_root():
    """The app's state is its settings (read by the shared plumbing) and its container: a route
    reading any other ``app.state.<name>`` is a part the start-up check cannot see (a 500 at its
    first request; the rollouts router was one)."""
    root = Path(corral_api.__file__).parent
    reads = re.compile(r"app\.state\.(?!settings\b|services\b)\w+|getattr\([^)]*\.state, \"(?!settings\"|services\")")
    found = [f"{path.relative_to(root)}:{n}: {line.strip()}"
             for path in sorted(root.rglob("*.py")) if path.name not in ("app.py", "deps.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if reads.search(line) and not line.lstrip().startswith(("#", '"', "``"))]
    assert found == []
