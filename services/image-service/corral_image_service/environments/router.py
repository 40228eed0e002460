from fastapi import APIRouter
from fastapi.responses import JSONResponse

from corral_image_service.deps import ServicesDep
from corral_image_service.environments.schemas import EnvironmentIn, EnvironmentOut
from corral_image_service.layers.router import Owner

router = APIRouter(prefix="/v1/environments", tags=["environments"])


@router.post("", response_model=EnvironmentOut, status_code=201, summary="Create an environment from existing layers",
             responses={200: {"model": EnvironmentOut, "description": "Identical environment already existed"},
                        409: {"description": "Name exists with a different combination"},
                        422: {"description": "Unknown layer or layer of the wrong kind"}})
def create_environment(body: EnvironmentIn, svc: ServicesDep, owner: Owner = "") -> JSONResponse:
    env, created = svc.environments.create(body, owner)
    return JSONResponse(env.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("", response_model=list[EnvironmentOut], summary="List environments")
def list_environments(svc: ServicesDep, owner: Owner = "") -> list[EnvironmentOut]:
    return svc.environments.list(owner)


@router.get("/{name}", response_model=EnvironmentOut, summary="Get one environment",
            responses={404: {"description": "Unknown environment"}})
def get_environment(name: str, svc: ServicesDep, owner: Owner = "") -> EnvironmentOut:
    return svc.environments.get(name, owner)


@router.delete("/{name}", response_model=EnvironmentOut, summary="Delete one of owner's environments",
               responses={404: {"description": "Unknown environment"}})
def delete_environment(name: str, svc: ServicesDep, owner: Owner = "") -> EnvironmentOut:
    return svc.environments.delete(name, owner)
