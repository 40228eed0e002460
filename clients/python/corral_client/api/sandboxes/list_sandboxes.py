from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.sandbox_list import SandboxList
from ...models.sandbox_state import SandboxState
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    label: list[str] | Unset = UNSET,
    state: None | SandboxState | Unset = UNSET,
    limit: int | None | Unset = UNSET,
    after: None | str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_label: list[str] | Unset = UNSET
    if not isinstance(label, Unset):
        json_label = label

    params["label"] = json_label

    json_state: None | str | Unset
    if isinstance(state, Unset):
        json_state = UNSET
    elif isinstance(state, SandboxState):
        json_state = state.value
    else:
        json_state = state
    params["state"] = json_state

    json_limit: int | None | Unset
    if isinstance(limit, Unset):
        json_limit = UNSET
    else:
        json_limit = limit
    params["limit"] = json_limit

    json_after: None | str | Unset
    if isinstance(after, Unset):
        json_after = UNSET
    else:
        json_after = after
    params["after"] = json_after

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/sandboxes",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | SandboxList | None:
    if response.status_code == 200:
        response_200 = SandboxList.from_dict(response.json())

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
) -> Response[ErrorResponse | SandboxList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    label: list[str] | Unset = UNSET,
    state: None | SandboxState | Unset = UNSET,
    limit: int | None | Unset = UNSET,
    after: None | str | Unset = UNSET,
) -> Response[ErrorResponse | SandboxList]:
    """List Sandboxes

    Args:
        label (list[str] | Unset): key=value; repeat to AND
        state (None | SandboxState | Unset):
        limit (int | None | Unset): At most this many, in id order (then next_after says where the
            next page starts); unset: all of them
        after (None | str | Unset): Start after this sandbox id (a page's next_after)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | SandboxList]
    """

    kwargs = _get_kwargs(
        label=label,
        state=state,
        limit=limit,
        after=after,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    label: list[str] | Unset = UNSET,
    state: None | SandboxState | Unset = UNSET,
    limit: int | None | Unset = UNSET,
    after: None | str | Unset = UNSET,
) -> ErrorResponse | SandboxList | None:
    """List Sandboxes

    Args:
        label (list[str] | Unset): key=value; repeat to AND
        state (None | SandboxState | Unset):
        limit (int | None | Unset): At most this many, in id order (then next_after says where the
            next page starts); unset: all of them
        after (None | str | Unset): Start after this sandbox id (a page's next_after)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | SandboxList
    """

    return sync_detailed(
        client=client,
        label=label,
        state=state,
        limit=limit,
        after=after,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    label: list[str] | Unset = UNSET,
    state: None | SandboxState | Unset = UNSET,
    limit: int | None | Unset = UNSET,
    after: None | str | Unset = UNSET,
) -> Response[ErrorResponse | SandboxList]:
    """List Sandboxes

    Args:
        label (list[str] | Unset): key=value; repeat to AND
        state (None | SandboxState | Unset):
        limit (int | None | Unset): At most this many, in id order (then next_after says where the
            next page starts); unset: all of them
        after (None | str | Unset): Start after this sandbox id (a page's next_after)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | SandboxList]
    """

    kwargs = _get_kwargs(
        label=label,
        state=state,
        limit=limit,
        after=after,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    label: list[str] | Unset = UNSET,
    state: None | SandboxState | Unset = UNSET,
    limit: int | None | Unset = UNSET,
    after: None | str | Unset = UNSET,
) -> ErrorResponse | SandboxList | None:
    """List Sandboxes

    Args:
        label (list[str] | Unset): key=value; repeat to AND
        state (None | SandboxState | Unset):
        limit (int | None | Unset): At most this many, in id order (then next_after says where the
            next page starts); unset: all of them
        after (None | str | Unset): Start after this sandbox id (a page's next_after)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | SandboxList
    """

    return (
        await asyncio_detailed(
            client=client,
            label=label,
            state=state,
            limit=limit,
            after=after,
        )
    ).parsed
