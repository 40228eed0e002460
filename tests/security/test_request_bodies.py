"""Request bodies against the live api (tests/live_platform.py runs it with
CORRAL_API_MAX_UPLOAD_MB=1, max_body_kb its default 1024): an upload past its cap, in whatever
framing, is a JSON 413, writes nothing into the sandbox and leaves nothing on the api host's
disk; oversized JSON bodies in any number leave the api's memory where it was."""

import asyncio
import os
import threading
import time
import uuid

import httpx
import pytest

from tests.live_platform import E2B_API_KEY
from tests.polling import until_sync

e2b = pytest.importorskip("e2b", reason="e2b SDK not installed (pip install -r requirements-dev.txt)")

MB = 1024 * 1024


def api_pid(platform) -> int:
    return int((platform["state"] / "run" / "api.pid").read_text())


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def temp_files(pid: int) -> list[str]:
    """Files the api process has open in its temp dir (a spooled upload is one, unlinked:
    "/tmp/#123 (deleted)")."""
    environ = dict(item.split("=", 1) for item in open(f"/proc/{pid}/environ").read().split("\0") if "=" in item)
    tmp = environ.get("TMPDIR", "/tmp").rstrip("/")
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if os.path.dirname(target) == tmp:  # not the platform's state dir below it
            found.append(target)
    return found


@pytest.fixture
def e2b_sandbox(platform):
    saved = {k: os.environ.get(k) for k in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL")}
    os.environ.update(E2B_API_KEY=E2B_API_KEY, E2B_API_URL=platform["api"], E2B_SANDBOX_URL=platform["api"])
    sbx = e2b.Sandbox.create(timeout=120)
    try:
        yield sbx
    finally:
        sbx.kill()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_a_chunked_multipart_e2b_upload_past_the_cap_is_refused_and_kept_nowhere(platform, e2b_sandbox):
    pid = api_pid(platform)
    target = f"/tmp/big-{uuid.uuid4().hex[:8]}.bin"
    boundary = "corral-test-boundary"
    spooled: list[str] = []

    def body():  # a generator: httpx sends it chunked, with no Content-Length
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{target}\"\r\n"
               "Content-Type: application/octet-stream\r\n\r\n").encode()
        block = b"\xab" * (256 * 1024)
        for i in range(6 * 4):  # 6 MB: past the 1 MB cap and past Starlette's 1 MB in-memory spool
            if i == 3 * 4:  # halfway: whatever the api keeps of the upload, it keeps now
                spooled.extend(temp_files(pid))
            yield block
        yield f"\r\n--{boundary}--\r\n".encode()

    response = httpx.post(f"{platform['api']}/files", params={"path": target}, content=body(), timeout=60,
                          headers={"content-type": f"multipart/form-data; boundary={boundary}",
                                   "E2b-Sandbox-Id": e2b_sandbox.sandbox_id,
                                   "X-Access-Token": e2b_sandbox._envd_access_token})
    assert response.status_code == 413, response.text
    error = response.json()  # E2B's shape: its SDK reads {code, message}
    assert error["code"] == 413 and f"{MB} bytes (max_upload_mb)" in error["message"]
    assert spooled == [], f"the api spooled the upload to its host's disk: {spooled}"
    # The node-agent removes the part it had written once the api broke the upload off.
    until_sync(lambda: not e2b_sandbox.files.exists(target), timeout_s=10, what=f"{target} to be gone")
    # Within the cap the unchanged SDK's multipart write (its default) still works.
    e2b_sandbox.files.write(target, b"\x01" * 300_000)
    assert e2b_sandbox.files.read(target, format="bytes") == b"\x01" * 300_000


def test_oversized_json_bodies_in_any_number_leave_the_api_memory_where_it_was(platform, lab):
    """256 concurrent exec bodies of 8 MB (the limit is 1 MB), half with a Content-Length, half
    chunked: every one is a JSON 413 naming the limit, and the api's RSS moves by no more than
    the bodies' limits (a 190 MB body once took it from 163 MB to 1.1 GB)."""
    pid = api_pid(platform)
    requests, size = 256, 8 * MB
    with lab.attacker.sandboxes.create("busybox", memory_mb=64) as sb:
        url = f"{platform['api']}/v1/sandboxes/{sb.id}/exec"
        headers = {"authorization": f"Bearer {platform['api_key']}", "content-type": "application/json"}
        block = b" " * (256 * 1024)

        async def chunks():
            yield b'{"cmd": ["true"], "env": {"X": "'
            for _ in range(size // len(block)):
                yield block
            yield b'"}}'

        class Declared(httpx.AsyncByteStream):  # streamed from the client, but with its length said up front
            async def __aiter__(self):
                async for chunk in chunks():
                    yield chunk

        async def one(http: httpx.AsyncClient, i: int) -> httpx.Response:
            if i % 2:
                return await http.post(url, content=chunks(), headers=headers)
            length = len(b'{"cmd": ["true"], "env": {"X": "') + size // len(block) * len(block) + 3
            return await http.post(url, content=Declared(), headers={**headers, "content-length": str(length)})

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=requests)
            async with httpx.AsyncClient(timeout=120, limits=limits) as http:
                return await asyncio.gather(*(one(http, i) for i in range(requests)))

        before = rss_bytes(pid)
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_bytes(pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            responses = asyncio.run(burst())
        finally:
            done.set()
            sampler.join()
        statuses = sorted({r.status_code for r in responses})
        assert statuses == [413], statuses
        for response in responses:
            error = response.json()["error"]
            assert error["code"] == "payload_too_large" and error["limit_bytes"] == MB, error
        growth = peak[0] - before
        print(f"api RSS {before / MB:.0f} MB -> peak {peak[0] / MB:.0f} MB (+{growth / MB:.0f} MB)")
        # A chunked body is held up to the limit (and the chunk that passes it: uvicorn reads
        # 256 KiB at most) until it is known to be too big, a declared one not at all; each
        # connection has uvicorn's read buffer (a chunk plus its 64 KiB high-water mark).
        bound = requests // 2 * (MB + 256 * 1024) + requests * 320 * 1024 + 32 * MB
        assert growth < bound, f"api RSS grew by {growth / MB:.0f} MB under {requests} oversized bodies"
