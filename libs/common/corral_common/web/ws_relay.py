"""Relaying a WebSocket between an accepted Starlette connection and an outgoing ``websockets``
client connection (port ingress: client → api → node-agent → a server in the sandbox).
Messages keep their kind (text or binary); a close on either side closes the other."""

import asyncio
import contextlib

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed


async def relay(downstream: WebSocket, upstream: ClientConnection) -> None:
    async def down_to_up() -> None:
        while True:
            message = await downstream.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is not None:
                await upstream.send(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send(message["bytes"])

    async def up_to_down() -> None:
        async for message in upstream:
            if isinstance(message, str):
                await downstream.send_text(message)
            else:
                await downstream.send_bytes(message)

    tasks = [asyncio.ensure_future(down_to_up()), asyncio.ensure_future(up_to_down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, WebSocketDisconnect, RuntimeError):
                await task
        await upstream.close()
        with contextlib.suppress(RuntimeError):
            await downstream.close()
