"""Guest agent protocol framing, the guest kit's pure helpers, and GuestAgentClient's
session logic against a scripted fake guest (the real agent runs in the integration tests)."""

import asyncio
import base64
import errno
import gzip
import os
import shutil
import subprocess
import tempfile

import pytest

from corral_common.contracts.exec import ExecRequest
from corral_node_agent.backends.vm import guestkit
from corral_node_agent.backends.vm.agent_client import GuestAgentClient, _error
from corral_node_agent.backends.vm.protocol import (
    MARKER,
    MAX_FRAME,
    FrameDecoder,
    ProtocolError,
    encode_frame,
)
from corral_node_agent.errors import (
    BadInput,
    DiskFull,
    GuestKitMissing,
    GuestLost,
    GuestTimeout,
    NotFound,
    TooLarge,
)
from corral_node_agent.http_errors import http_error
from tests.polling import until

# ---- framing --------------------------------------------------------------------------


def test_frames_round_trip_whatever_the_read_boundaries():
    messages = [{"id": i, "type": "stdout", "data": "x" * i, "text": "héllo ✓"} for i in range(1, 40)]
    stream = b"".join(encode_frame(m) for m in messages)
    for step in (1, 3, 7, 4096):
        decoder = FrameDecoder(wait_for_marker=False)
        out = []
        for i in range(0, len(stream), step):
            out += decoder.feed(stream[i:i + step])
        assert out == messages


def test_frame_header_is_big_endian_length():
    frame = encode_frame({"id": 1})
    assert frame[:4] == len(b'{"id":1}').to_bytes(4, "big") and frame[4:] == b'{"id":1}'


def test_bytes_before_the_first_marker_are_stale():
    decoder = FrameDecoder(wait_for_marker=True)
    assert decoder.feed(encode_frame({"id": 1, "type": "ok"})) == []
    assert decoder.feed(MARKER + encode_frame({"id": 2, "type": "ok"})) == [{"id": 2, "type": "ok"}]


def test_marker_drops_a_partial_frame_even_split_across_reads():
    decoder = FrameDecoder(wait_for_marker=False)
    partial = encode_frame({"id": 1, "type": "stdout", "data": "abcdef"})[:9]
    assert decoder.feed(partial + MARKER[:3]) == []
    assert decoder.feed(MARKER[3:] + encode_frame({"id": 7})) == [{"id": 7}]
    assert decoder.markers_seen == 1


def test_0xff_bytes_inside_a_length_header_are_not_a_marker():
    decoder = FrameDecoder(wait_for_marker=False)
    big = {"id": 1, "data": "a" * 0xFFED}  # length 0x0000FFFF: two 0xFF bytes in the header
    frame = encode_frame(big)
    assert frame[2:4] == b"\xff\xff"
    assert decoder.feed(frame + frame) == [big, big]


def test_bad_length_and_bad_json_are_protocol_errors():
    with pytest.raises(ProtocolError):
        FrameDecoder(wait_for_marker=False).feed((MAX_FRAME + 1).to_bytes(4, "big"))
    with pytest.raises(ProtocolError):
        FrameDecoder(wait_for_marker=False).feed((3).to_bytes(4, "big") + b"{no")
    decoder = FrameDecoder(wait_for_marker=False)
    with pytest.raises(ProtocolError):
        decoder.feed((2).to_bytes(4, "big") + b"[]")
    # after an error the decoder waits for the next marker
    assert decoder.feed(encode_frame({"id": 1})) == []
    assert decoder.feed(MARKER + encode_frame({"id": 2})) == [{"id": 2}]


# ---- guest kit helpers -------------------------------------------------------------------


def test_kernel_cmdline_carries_the_init_contract_and_tcg_settings():
    line = guestkit.kernel_cmdline(lowers=["pmem0", "vd:l1"], upper_mb=512, hostname="sb-1", tty_shell=True,
                                   extra="foo=bar")
    args = line.split()
    assert "corral.lowers=pmem0,vd:l1" in args  # base first, as given
    assert {"corral.upper_mb=512", "corral.hostname=sb-1", "corral.tty=1", "console=ttyS0", "panic=-1",
            "swiotlb=noforce", "tsc_early_khz=2300000", "lpj=4600000", "quiet", "foo=bar", "cryptomgr.notests",
            "initcall_blacklist=crypto_kdf108_init"} <= set(args)
    kvm = guestkit.kernel_cmdline(lowers=["vd:l0"], upper_mb=64, hostname="x", tcg=False, console="hvc0")
    assert "tsc_early_khz=2300000" not in kvm and "corral.tty=1" not in kvm and "console=hvc0" in kvm
    on_disk = guestkit.kernel_cmdline(lowers=["vd:l0"], upper_disk="upper", hostname="x").split()
    assert "corral.upper=vd:upper" in on_disk and not any(a.startswith("corral.upper_mb=") for a in on_disk)


@pytest.mark.parametrize("kwargs", [
    {"lowers": []}, {"lowers": ["sda"]}, {"lowers": ["vd:a b"]}, {"hostname": "bad name"},
    {"hostname": "-x"}, {"upper_mb": 0}, {"upper_mb": None}, {"upper_disk": "upper"}, {"upper_mb": None, "upper_disk": "a b"},
])
def test_kernel_cmdline_rejects_what_init_cannot_parse(kwargs):
    args = {"lowers": ["vd:l0"], "upper_mb": 64, "hostname": "ok", **kwargs}
    with pytest.raises(ValueError):
        guestkit.kernel_cmdline(**args)


def test_module_closure_loads_dependencies_first():
    dep = "\n".join([
        "kernel/a/virtio_blk.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko",
        "kernel/a/virtio.ko: kernel/a/virtio_ring.ko",
        "kernel/a/virtio_ring.ko:",
        "kernel/b/erofs.ko: kernel/lib/libcrc32c.ko",
        "kernel/lib/libcrc32c.ko:",
        "kernel/c/unrelated.ko:",
    ])
    order = guestkit.module_closure(dep, ("virtio_blk", "erofs", "built_in_one"))
    assert order == ["kernel/a/virtio_ring.ko", "kernel/a/virtio.ko", "kernel/a/virtio_blk.ko",
                     "kernel/lib/libcrc32c.ko", "kernel/b/erofs.ko"]


@pytest.mark.skipif(shutil.which("cpio") is None, reason="needs cpio to read the archive back")
def test_cpio_writer_output_is_read_back_by_cpio():
    writer = guestkit.CpioWriter()
    writer.directory("bin")
    writer.file("bin/tool", b"#!/bin/sh\necho hi\n", 0o755)
    writer.file("odd-size", b"x" * 5)
    writer.char_device("console", 5, 1)
    archive = gzip.decompress(gzip.compress(writer.finish(), mtime=0))
    listing = subprocess.run(["cpio", "-itv"], input=archive, capture_output=True, check=True).stdout.decode()
    assert "bin/tool" in listing and "odd-size" in listing and "console" in listing
    assert any(line.startswith("crw") and "5,   1" in line for line in listing.splitlines())
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["cpio", "-id", "--no-absolute-filenames", "bin/tool", "odd-size"], input=archive, cwd=out,
                       capture_output=True, check=True)
        assert open(f"{out}/bin/tool", "rb").read() == b"#!/bin/sh\necho hi\n"
        assert os.stat(f"{out}/bin/tool").st_mode & 0o777 == 0o755
        assert open(f"{out}/odd-size", "rb").read() == b"xxxxx"


def test_loading_a_missing_kit_says_how_to_build_it(tmp_path):
    with pytest.raises(GuestKitMissing) as info:
        guestkit.GuestKit.load(str(tmp_path))
    assert http_error(info.value).status_code == 503
    assert f"python -m corral_node_agent guestkit build --out {tmp_path}" in info.value.message


def test_errno_answers_map_like_the_container_backend():
    parts = ["home", "user", "a.txt"]
    assert isinstance(_error({"errno": errno.ENOENT, "at": 3}, parts), NotFound)
    assert "/home/user/a.txt" in _error({"errno": errno.ENOENT, "at": 3}, parts).message
    assert "/home/user" == _error({"errno": errno.ENOTDIR, "at": 2}, parts).message.split(":")[0]
    assert isinstance(_error({"errno": errno.ELOOP, "at": 1}, parts), BadInput)
    assert isinstance(_error({"errno": errno.EISDIR, "at": 3}, parts), BadInput)
    assert isinstance(_error({"errno": errno.ENOSPC}, parts), DiskFull)
    assert isinstance(_error({"errno": errno.EINVAL, "message": "bad"}, None), BadInput)


# ---- client session logic against a fake guest ----------------------------------------


class FakeGuest:
    """A unix-socket server that answers like the agent would, scripted per test."""

    def __init__(self, path: str, on_message):
        self.path = path
        self.on_message = on_message
        self.received: list[dict] = []
        self.server: asyncio.AbstractServer | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self):
        self.server = await asyncio.start_unix_server(self._serve, self.path)
        return self

    async def __aexit__(self, *exc):
        for w in self.writers:
            w.close()
        self.server.close()

    async def _serve(self, reader, writer):
        self.writers.append(writer)
        decoder = FrameDecoder(wait_for_marker=False)
        try:
            while data := await reader.read(65536):
                for msg in decoder.feed(data):
                    self.received.append(msg)
                    out = self.on_message(msg)
                    if out:
                        writer.write(out)
        except (asyncio.CancelledError, ConnectionError):
            pass


def hello_ok(msg, session=None):
    return MARKER + encode_frame({"id": msg["id"], "type": "ok", "version": 1,
                                  "session": session or msg["session"]})


async def test_client_ignores_stale_answers_from_an_earlier_session(tmp_path):
    path = str(tmp_path / "agent.sock")

    def answer(msg):
        if msg["op"] == "hello":
            # stale bytes first: an old session's half frame and a hello answer for another session
            return (b"\x00\x00\x00\x40{\"id\":1" + MARKER + encode_frame({"id": msg["id"], "type": "ok",
                                                                         "version": 1, "session": "old"})
                    + hello_ok(msg))
        if msg["op"] == "exec":
            return (encode_frame({"id": msg["id"], "type": "stdout", "data": "aGk="})
                    + encode_frame({"id": msg["id"], "type": "exit", "exit_code": 0, "duration_ms": 1.0,
                                    "timed_out": False, "truncated": False, "oom_killed": False}))
        return None

    async with FakeGuest(path, answer) as guest:
        client = await GuestAgentClient.connect(path, timeout_s=5, env={"A": "1"}, output_limit_bytes=100)
        result = await client.exec(ExecRequest(cmd="echo hi", env={"B": "2"}, output_limit=1000))
        assert (result.exit_code, result.stdout) == (0, "hi")
        sent = next(m for m in guest.received if m["op"] == "exec")
        assert sent["argv"] == ["/bin/sh", "-c", "echo hi"]
        assert sent["env"] == {"A": "1", "B": "2"} and sent["output_limit"] == 100
        await client.close()


async def test_client_hands_back_output_bytes_as_asked(tmp_path):
    """The guest sends raw bytes (base64 frames); the client decodes them as utf-8 text
    (U+FFFD for invalid bytes, a character split across frames kept whole) or keeps them
    intact as base64, marking which."""
    path = str(tmp_path / "agent.sock")
    pieces = [b"\xff\xfe" + "é".encode()[:1], "é".encode()[1:] + b"\n"]

    def answer(msg):
        if msg["op"] == "hello":
            return hello_ok(msg)
        if msg["op"] == "exec":
            frames = [encode_frame({"id": msg["id"], "type": "stdout", "data": base64.b64encode(p).decode()})
                      for p in pieces]
            return b"".join(frames) + encode_frame({"id": msg["id"], "type": "stderr", "data": "ww=="}) \
                + encode_frame({"id": msg["id"], "type": "exit", "exit_code": 0, "duration_ms": 1.0,
                                "timed_out": False, "truncated": False, "oom_killed": False})
        return None

    async with FakeGuest(path, answer):
        client = await GuestAgentClient.connect(path, timeout_s=5)
        text = [c async for c in client.exec_stream(ExecRequest(cmd="x"))]
        assert [(c.type, c.data, c.encoding) for c in text[:-1]] == [
            ("stdout", "\ufffd\ufffd", "utf-8"), ("stdout", "é\n", "utf-8"), ("stderr", "\ufffd", "utf-8")]
        result = text[-1].result
        assert (result.encoding, result.stdout, result.stderr) == ("utf-8", "\ufffd\ufffdé\n", "\ufffd")

        raw = [c async for c in client.exec_stream(ExecRequest(cmd="x", output_encoding="base64"))]
        assert [(c.type, base64.b64decode(c.data), c.encoding) for c in raw[:-1]] == [
            ("stdout", pieces[0], "base64"), ("stdout", pieces[1], "base64"), ("stderr", b"\xc3", "base64")]
        result = raw[-1].result
        assert result.encoding == "base64" and base64.b64decode(result.stdout) == b"".join(pieces)
        assert base64.b64decode(result.stderr) == b"\xc3"
        await client.close()


async def test_client_retries_hello_until_the_guest_is_up(tmp_path):
    path = str(tmp_path / "agent.sock")
    hellos = []

    def answer(msg):
        if msg["op"] == "hello":
            hellos.append(msg)
            # the first hello is lost (guest not listening yet); the agent's `ready` triggers a resend
            if len(hellos) == 1:
                return MARKER + encode_frame({"id": 0, "type": "ready", "version": 1})
            return hello_ok(msg)
        return None

    async with FakeGuest(path, answer):
        client = await GuestAgentClient.connect(path, timeout_s=5)
        assert len(hellos) == 2 and hellos[0]["session"] == hellos[1]["session"]
        await client.close()


async def test_pending_calls_fail_promptly_when_the_client_closes_or_the_guest_goes(tmp_path):
    path = str(tmp_path / "agent.sock")

    def answer(msg):
        return hello_ok(msg) if msg["op"] == "hello" else None  # never answers anything else

    async with FakeGuest(path, answer) as guest:
        client = await GuestAgentClient.connect(path, timeout_s=5)
        call = asyncio.ensure_future(client.exec(ExecRequest(cmd="sleep 1000")))
        await asyncio.sleep(0)
        await client.close()
        with pytest.raises(GuestLost):
            await asyncio.wait_for(call, 2)
        with pytest.raises(GuestLost):
            await client.stat("/x")

        client = await GuestAgentClient.connect(path, timeout_s=5)
        call = asyncio.ensure_future(client.read_file("/x"))
        await until(lambda: any(m.get("op") == "read" for m in guest.received), 5, "the read", 0.01)
        for w in guest.writers:
            w.close()  # QEMU died
        with pytest.raises(GuestLost):
            await asyncio.wait_for(call, 2)
        await client.close()


async def test_connect_times_out_with_a_clear_error(tmp_path):
    with pytest.raises(GuestTimeout, match="not available"):
        await GuestAgentClient.connect(str(tmp_path / "nobody.sock"), timeout_s=0.2)
    path = str(tmp_path / "agent.sock")
    async with FakeGuest(path, lambda msg: None):
        with pytest.raises(GuestTimeout, match="handshake"):
            await GuestAgentClient.connect(path, timeout_s=0.5)


async def test_bad_requests_are_refused_before_reaching_the_guest(tmp_path):
    path = str(tmp_path / "agent.sock")

    async with FakeGuest(path, lambda msg: hello_ok(msg) if msg["op"] == "hello" else None) as guest:
        client = await GuestAgentClient.connect(path, timeout_s=5, max_upload_bytes=10)
        with pytest.raises(BadInput):
            await client.exec(ExecRequest(cmd=[]))
        with pytest.raises(BadInput):
            # The model refuses such an env itself; the client still checks what it is handed.
            await client.exec(ExecRequest.model_construct(**{**ExecRequest(cmd="x").model_dump(), "env": {"A=B": "1"}}))
        with pytest.raises(BadInput, match=r"\.\."):
            await client.read_file("/etc/../x")
        with pytest.raises(TooLarge):
            await client.write_file("/big", b"x" * 11)
        with pytest.raises(TooLarge, match="stdin"):
            await client.exec(ExecRequest(cmd="cat", stdin="x" * (4 << 20)))
        await until(lambda: guest.received[-1]["op"] == "write_abort", 5, "the write_abort", 0.01)
        ops = [m["op"] for m in guest.received]
        assert ops[-2:] == ["write_open", "write_abort"]  # the refused upload is removed guest-side
        assert "exec" not in ops and "read" not in ops
        await client.close()


async def test_downloads_are_credited_back_as_the_reader_consumes(tmp_path):
    """The guest may run READ_WINDOW bytes ahead; the client grants more only as its
    reader takes chunks, so a slow reader holds the guest back."""
    from corral_node_agent.backends.vm.agent_client import READ_WINDOW

    path = str(tmp_path / "agent.sock")
    chunk = b"z" * (256 << 10)

    def answer(msg):
        if msg["op"] == "hello":
            return hello_ok(msg)
        if msg["op"] == "read":
            assert msg["window"] == READ_WINDOW
            frames = encode_frame({"id": msg["id"], "type": "open", "size": READ_WINDOW})
            for _ in range(READ_WINDOW // len(chunk)):
                frames += encode_frame({"id": msg["id"], "type": "data", "data": base64.b64encode(chunk).decode()})
            return frames + encode_frame({"id": msg["id"], "type": "ok", "size": READ_WINDOW})
        return None

    async with FakeGuest(path, answer) as guest:
        client = await GuestAgentClient.connect(path, timeout_s=5)
        size, chunks = await client.open_file("/big")
        taken = 0
        async for data in chunks:
            taken += len(data)
            acks = [m for m in guest.received if m["op"] == "read_ack"]
            if taken <= READ_WINDOW // 2:
                assert not acks  # nothing granted before the reader took half a window
        assert taken == size == READ_WINDOW

        await until(lambda: [m for m in guest.received if m["op"] == "read_ack"], 5, "a read_ack", 0.01)
        ack = next(m for m in guest.received if m["op"] == "read_ack")
        assert ack["bytes"] == READ_WINDOW // 2
        await client.close()


def test_a_guest_command_run_as_root_gets_roots_home_unless_it_names_one():
    from corral_common.contracts.exec import ExecRequest
    from corral_node_agent.backends.vm.agent_client import GuestAgentClient

    client = GuestAgentClient(None, None, env={"HOME": "/home/user", "A": "1"})  # type: ignore[arg-type]
    assert client._exec_message(ExecRequest(cmd="env", user="root"))["env"] == {"HOME": "/root", "A": "1"}
    assert client._exec_message(ExecRequest(cmd="env"))["env"]["HOME"] == "/home/user"
    named = client._exec_message(ExecRequest(cmd="env", user="root", env={"HOME": "/srv"}))
    assert named["env"]["HOME"] == "/srv"
