from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.list_rollouts_status_type_0 import ListRolloutsStatusType0
from ...models.rollout_list import RolloutList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    job_id: None | str | Unset = UNSET,
    status: ListRolloutsStatusType0 | None | Unset = UNSET,
    limit: int | Unset = 100,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_job_id: None | str | Unset
    if isinstance(job_id, Unset):
        json_job_id = UNSET
    else:
        json_job_id = job_id
    params["job_id"] = json_job_id

    json_status: None | str | Unset
    if isinstance(status, Unset):
        json_status = UNSET
    elif isinstance(status, ListRolloutsStatusType0):
        json_status = status.value
    else:
        json_status = status
    params["status"] = json_status

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/rollouts",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | RolloutList | None:
    if response.status_code == 200:
        response_200 = RolloutList.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = ErrorResponse.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = ErrorResponse.from_dict(response.json())

        return response_401

    if response.status_code == 404:
        response_404 = ErrorResponse.from_dict(response.json())

        return response_404

    if response.status_code == 409:
        response_409 = ErrorResponse.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = ErrorResponse.from_dict(response.json())

        return response_413

    if response.status_code == 422:
        response_422 = ErrorResponse.from_dict(response.json())

        return response_422

    if response.status_code == 429:
        response_429 = ErrorResponse.from_dict(response.json())

        return response_429

    if response.status_code == 503:
        response_503 = ErrorResponse.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[ErrorResponse | RolloutList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    job_id: None | str | Unset = UNSET,
    status: ListRolloutsStatusType0 | None | Unset = UNSET,
    limit: int | Unset = 100,
) -> Response[ErrorResponse | RolloutList]:
    """List Rollouts

     This tenant's rollouts, oldest first (without their steps).

    Args:
        job_id (None | str | Unset):
        status (ListRolloutsStatusType0 | None | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | RolloutList]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        status=status,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    job_id: None | str | Unset = UNSET,
    status: ListRolloutsStatusType0 | None | Unset = UNSET,
    limit: int | Unset = 100,
) -> ErrorResponse | RolloutList | None:
    """List Rollouts

     This tenant's rollouts, oldest first (without their steps).

    Args:
        job_id (None | str | Unset):
        status (ListRolloutsStatusType0 | None | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | RolloutList
    """

    return sync_detailed(
        client=client,
        job_id=job_id,
        status=status,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    job_id: None | str | Unset = UNSET,
    status: ListRolloutsStatusType0 | None | Unset = UNSET,
    limit: int | Unset = 100,
) -> Response[ErrorResponse | RolloutList]:
    """List Rollouts

     This tenant's rollouts, oldest first (without their steps).

    Args:
        job_id (None | str | Unset):
        status (ListRolloutsStatusType0 | None | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | RolloutList]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        status=status,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    job_id: None | str | Unset = UNSET,
    status: ListRolloutsStatusType0 | None | Unset = UNSET,
    limit: int | Unset = 100,
) -> ErrorResponse | RolloutList | None:
    """List Rollouts

     This tenant's rollouts, oldest first (without their steps).

    Args:
        job_id (None | str | Unset):
        status (ListRolloutsStatusType0 | None | Unset):
        limit (int | Unset):  Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | RolloutList
    """

    return (
        await asyncio_detailed(
            client=client,
            job_id=job_id,
            status=status,
            limit=limit,
        )
    ).parsed
