from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.rollout import Rollout
from ...models.rollout_create import RolloutCreate
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: RolloutCreate,
    wait: bool | Unset = True,
    timeout: float | Unset = 120.0,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    params: dict[str, Any] = {}

    params["wait"] = wait

    params["timeout"] = timeout

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/rollouts",
        "params": params,
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | Rollout | None:
    if response.status_code == 201:
        response_201 = Rollout.from_dict(response.json())

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
) -> Response[ErrorResponse | Rollout]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: RolloutCreate,
    wait: bool | Unset = True,
    timeout: float | Unset = 120.0,
) -> Response[ErrorResponse | Rollout]:
    """Create Rollout

     Bind a rollout to a new sandbox (``sandbox``: the spec of POST /v1/sandboxes) or to an
    existing one (``sandbox_id``).

    Args:
        wait (bool | Unset): Answer once the sandbox runs (or failed) Default: True.
        timeout (float | Unset):  Default: 120.0.
        body (RolloutCreate): Body of ``POST /v1/rollouts``: a new sandbox (``sandbox``) or an
            existing one (``sandbox_id``).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | Rollout]
    """

    kwargs = _get_kwargs(
        body=body,
        wait=wait,
        timeout=timeout,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: RolloutCreate,
    wait: bool | Unset = True,
    timeout: float | Unset = 120.0,
) -> ErrorResponse | Rollout | None:
    """Create Rollout

     Bind a rollout to a new sandbox (``sandbox``: the spec of POST /v1/sandboxes) or to an
    existing one (``sandbox_id``).

    Args:
        wait (bool | Unset): Answer once the sandbox runs (or failed) Default: True.
        timeout (float | Unset):  Default: 120.0.
        body (RolloutCreate): Body of ``POST /v1/rollouts``: a new sandbox (``sandbox``) or an
            existing one (``sandbox_id``).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | Rollout
    """

    return sync_detailed(
        client=client,
        body=body,
        wait=wait,
        timeout=timeout,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: RolloutCreate,
    wait: bool | Unset = True,
    timeout: float | Unset = 120.0,
) -> Response[ErrorResponse | Rollout]:
    """Create Rollout

     Bind a rollout to a new sandbox (``sandbox``: the spec of POST /v1/sandboxes) or to an
    existing one (``sandbox_id``).

    Args:
        wait (bool | Unset): Answer once the sandbox runs (or failed) Default: True.
        timeout (float | Unset):  Default: 120.0.
        body (RolloutCreate): Body of ``POST /v1/rollouts``: a new sandbox (``sandbox``) or an
            existing one (``sandbox_id``).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | Rollout]
    """

    kwargs = _get_kwargs(
        body=body,
        wait=wait,
        timeout=timeout,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: RolloutCreate,
    wait: bool | Unset = True,
    timeout: float | Unset = 120.0,
) -> ErrorResponse | Rollout | None:
    """Create Rollout

     Bind a rollout to a new sandbox (``sandbox``: the spec of POST /v1/sandboxes) or to an
    existing one (``sandbox_id``).

    Args:
        wait (bool | Unset): Answer once the sandbox runs (or failed) Default: True.
        timeout (float | Unset):  Default: 120.0.
        body (RolloutCreate): Body of ``POST /v1/rollouts``: a new sandbox (``sandbox``) or an
            existing one (``sandbox_id``).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | Rollout
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            wait=wait,
            timeout=timeout,
        )
    ).parsed
