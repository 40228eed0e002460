from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.sandbox_list import SandboxList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    sandbox_id: str,
    *,
    count: int | Unset = 1,
    processes: bool | Unset = False,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["count"] = count

    params["processes"] = processes

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/sandboxes/{sandbox_id}/fork".format(
            sandbox_id=quote(str(sandbox_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | SandboxList | None:
    if response.status_code == 202:
        response_202 = SandboxList.from_dict(response.json())

        return response_202

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
) -> Response[ErrorResponse | SandboxList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    count: int | Unset = 1,
    processes: bool | Unset = False,
) -> Response[ErrorResponse | SandboxList]:
    """Fork Sandbox

     ``count`` new sandboxes from this one's current state: containers from a commit of its
    files (labelled ``corral.forked_from``), VMs from a snapshot (memory included).

    Args:
        sandbox_id (str):
        count (int | Unset): How many sandboxes Default: 1.
        processes (bool | Unset): Carry running processes (containers: 409 criu_unavailable)
            Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | SandboxList]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        count=count,
        processes=processes,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    count: int | Unset = 1,
    processes: bool | Unset = False,
) -> ErrorResponse | SandboxList | None:
    """Fork Sandbox

     ``count`` new sandboxes from this one's current state: containers from a commit of its
    files (labelled ``corral.forked_from``), VMs from a snapshot (memory included).

    Args:
        sandbox_id (str):
        count (int | Unset): How many sandboxes Default: 1.
        processes (bool | Unset): Carry running processes (containers: 409 criu_unavailable)
            Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | SandboxList
    """

    return sync_detailed(
        sandbox_id=sandbox_id,
        client=client,
        count=count,
        processes=processes,
    ).parsed


async def asyncio_detailed(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    count: int | Unset = 1,
    processes: bool | Unset = False,
) -> Response[ErrorResponse | SandboxList]:
    """Fork Sandbox

     ``count`` new sandboxes from this one's current state: containers from a commit of its
    files (labelled ``corral.forked_from``), VMs from a snapshot (memory included).

    Args:
        sandbox_id (str):
        count (int | Unset): How many sandboxes Default: 1.
        processes (bool | Unset): Carry running processes (containers: 409 criu_unavailable)
            Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | SandboxList]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        count=count,
        processes=processes,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    count: int | Unset = 1,
    processes: bool | Unset = False,
) -> ErrorResponse | SandboxList | None:
    """Fork Sandbox

     ``count`` new sandboxes from this one's current state: containers from a commit of its
    files (labelled ``corral.forked_from``), VMs from a snapshot (memory included).

    Args:
        sandbox_id (str):
        count (int | Unset): How many sandboxes Default: 1.
        processes (bool | Unset): Carry running processes (containers: 409 criu_unavailable)
            Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | SandboxList
    """

    return (
        await asyncio_detailed(
            sandbox_id=sandbox_id,
            client=client,
            count=count,
            processes=processes,
        )
    ).parsed
