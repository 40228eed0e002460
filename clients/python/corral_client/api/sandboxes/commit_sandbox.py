from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.commit_request import CommitRequest
from ...models.commit_result import CommitResult
from ...models.error_response import ErrorResponse
from ...types import UNSET, Response, Unset


def _get_kwargs(
    sandbox_id: str,
    *,
    body: CommitRequest | None | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/sandboxes/{sandbox_id}/commit".format(
            sandbox_id=quote(str(sandbox_id), safe=""),
        ),
    }

    if isinstance(body, CommitRequest):
        _kwargs["json"] = body.to_dict()
    else:
        _kwargs["json"] = body

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> CommitResult | ErrorResponse | None:
    if response.status_code == 201:
        response_201 = CommitResult.from_dict(response.json())

        return response_201

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
) -> Response[CommitResult | ErrorResponse]:
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
    body: CommitRequest | None | Unset = UNSET,
) -> Response[CommitResult | ErrorResponse]:
    """Commit Sandbox

     Save a running container's writable layer (its changes: new and changed files, deletions
    as whiteouts) as a new ``diff`` layer, and with ``environment`` a new environment that starts
    from it. The sandbox is frozen while its layer is read, then runs on. VMs: 409 (snapshot them).

    Args:
        sandbox_id (str):
        body (CommitRequest | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[CommitResult | ErrorResponse]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    body: CommitRequest | None | Unset = UNSET,
) -> CommitResult | ErrorResponse | None:
    """Commit Sandbox

     Save a running container's writable layer (its changes: new and changed files, deletions
    as whiteouts) as a new ``diff`` layer, and with ``environment`` a new environment that starts
    from it. The sandbox is frozen while its layer is read, then runs on. VMs: 409 (snapshot them).

    Args:
        sandbox_id (str):
        body (CommitRequest | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        CommitResult | ErrorResponse
    """

    return sync_detailed(
        sandbox_id=sandbox_id,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    body: CommitRequest | None | Unset = UNSET,
) -> Response[CommitResult | ErrorResponse]:
    """Commit Sandbox

     Save a running container's writable layer (its changes: new and changed files, deletions
    as whiteouts) as a new ``diff`` layer, and with ``environment`` a new environment that starts
    from it. The sandbox is frozen while its layer is read, then runs on. VMs: 409 (snapshot them).

    Args:
        sandbox_id (str):
        body (CommitRequest | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[CommitResult | ErrorResponse]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    body: CommitRequest | None | Unset = UNSET,
) -> CommitResult | ErrorResponse | None:
    """Commit Sandbox

     Save a running container's writable layer (its changes: new and changed files, deletions
    as whiteouts) as a new ``diff`` layer, and with ``environment`` a new environment that starts
    from it. The sandbox is frozen while its layer is read, then runs on. VMs: 409 (snapshot them).

    Args:
        sandbox_id (str):
        body (CommitRequest | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        CommitResult | ErrorResponse
    """

    return (
        await asyncio_detailed(
            sandbox_id=sandbox_id,
            client=client,
            body=body,
        )
    ).parsed
