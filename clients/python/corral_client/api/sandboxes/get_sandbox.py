from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.get_sandbox_wait_for_type_0 import GetSandboxWaitForType0
from ...models.sandbox import Sandbox
from ...types import UNSET, Response, Unset


def _get_kwargs(
    sandbox_id: str,
    *,
    wait_for: GetSandboxWaitForType0 | None | Unset = UNSET,
    timeout: float | Unset = 60.0,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_wait_for: None | str | Unset
    if isinstance(wait_for, Unset):
        json_wait_for = UNSET
    elif isinstance(wait_for, GetSandboxWaitForType0):
        json_wait_for = wait_for.value
    else:
        json_wait_for = wait_for
    params["wait_for"] = json_wait_for

    params["timeout"] = timeout

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/sandboxes/{sandbox_id}".format(
            sandbox_id=quote(str(sandbox_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | Sandbox | None:
    if response.status_code == 200:
        response_200 = Sandbox.from_dict(response.json())

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
) -> Response[ErrorResponse | Sandbox]:
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
    wait_for: GetSandboxWaitForType0 | None | Unset = UNSET,
    timeout: float | Unset = 60.0,
) -> Response[ErrorResponse | Sandbox]:
    """Get Sandbox

    Args:
        sandbox_id (str):
        wait_for (GetSandboxWaitForType0 | None | Unset): Block until the sandbox reaches this
            state (or fails)
        timeout (float | Unset): Longest wait in seconds Default: 60.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | Sandbox]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        wait_for=wait_for,
        timeout=timeout,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    wait_for: GetSandboxWaitForType0 | None | Unset = UNSET,
    timeout: float | Unset = 60.0,
) -> ErrorResponse | Sandbox | None:
    """Get Sandbox

    Args:
        sandbox_id (str):
        wait_for (GetSandboxWaitForType0 | None | Unset): Block until the sandbox reaches this
            state (or fails)
        timeout (float | Unset): Longest wait in seconds Default: 60.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | Sandbox
    """

    return sync_detailed(
        sandbox_id=sandbox_id,
        client=client,
        wait_for=wait_for,
        timeout=timeout,
    ).parsed


async def asyncio_detailed(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    wait_for: GetSandboxWaitForType0 | None | Unset = UNSET,
    timeout: float | Unset = 60.0,
) -> Response[ErrorResponse | Sandbox]:
    """Get Sandbox

    Args:
        sandbox_id (str):
        wait_for (GetSandboxWaitForType0 | None | Unset): Block until the sandbox reaches this
            state (or fails)
        timeout (float | Unset): Longest wait in seconds Default: 60.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | Sandbox]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        wait_for=wait_for,
        timeout=timeout,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    sandbox_id: str,
    *,
    client: AuthenticatedClient,
    wait_for: GetSandboxWaitForType0 | None | Unset = UNSET,
    timeout: float | Unset = 60.0,
) -> ErrorResponse | Sandbox | None:
    """Get Sandbox

    Args:
        sandbox_id (str):
        wait_for (GetSandboxWaitForType0 | None | Unset): Block until the sandbox reaches this
            state (or fails)
        timeout (float | Unset): Longest wait in seconds Default: 60.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | Sandbox
    """

    return (
        await asyncio_detailed(
            sandbox_id=sandbox_id,
            client=client,
            wait_for=wait_for,
            timeout=timeout,
        )
    ).parsed
