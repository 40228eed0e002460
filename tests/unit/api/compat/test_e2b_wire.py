"""Pure parts of the E2B surface: the Connect codec, template choice, list filters, events."""

import json
import struct

import pytest

from corral_api.compat.e2b import connect
from corral_api.compat.e2b.connect import ConnectError
from corral_api.compat.e2b.envd import Envd, entry_info, user_of
from corral_api.compat.e2b.errors import E2bError
from corral_api.compat.e2b.processes import end_event
from corral_api.compat.e2b.router import _metadata_filter, _offset
from corral_api.compat.e2b.templates import Choice, TemplateResolver, parse_mapping
from corral_common.contracts.exec import FileInfo


def test_envelopes_round_trip_and_end_of_stream_carries_the_error():
    frame = connect.envelope({"event": {"start": {"pid": 7}}})
    assert frame[0] == connect.MESSAGE and struct.unpack(">I", frame[1:5])[0] == len(frame) - 5
    assert connect.parse_stream_request(frame) == {"event": {"start": {"pid": 7}}}
    end = connect.end_of_stream(ConnectError("not_found", "no such process"))
    assert end[0] == connect.END_STREAM
    assert json.loads(end[5:]) == {"error": {"code": "not_found", "message": "no such process"}}
    assert json.loads(connect.end_of_stream()[5:]) == {}


@pytest.mark.parametrize("body", [b"", b"\x00\x00\x00\x00\x09{}", b"\x01\x00\x00\x00\x02{}", b"\x00\x00\x00\x00\x02[]"])
def test_bad_stream_requests_are_connect_errors(body):
    with pytest.raises(ConnectError) as err:
        connect.parse_stream_request(body)
    assert err.value.code in ("invalid_argument", "unimplemented")


def test_timeout_header():
    assert connect.timeout_s({"connect-timeout-ms": "1500"}, 9) == 1.5
    assert connect.timeout_s({}, 9) == 9
    assert connect.timeout_s({"connect-timeout-ms": "0"}, 9) == 9
    with pytest.raises(ConnectError):
        connect.timeout_s({"connect-timeout-ms": "soon"}, 9)


def test_templates_mapping_metadata_and_isolation():
    resolver = TemplateResolver("base=busybox, secure=busybox/vm", "corral.environment", "corral.isolation")
    assert resolver.resolve("base", {}) == Choice("busybox")
    assert resolver.resolve("secure", {}) == Choice("busybox", "vm")
    assert resolver.resolve("debian-python", {}) == Choice("debian-python")
    assert resolver.resolve("base", {"corral.environment": "judge"}) == Choice("judge")
    assert resolver.resolve("base", {"corral.isolation": "vm"}) == Choice("busybox", "vm")
    with pytest.raises(ValueError):
        resolver.resolve("base", {"corral.isolation": "hardware"})
    for bad in ("base", "=busybox", "base=busybox/gpu"):
        with pytest.raises(ValueError):
            parse_mapping(bad)


def test_metadata_filter_reads_the_sdks_encoding():
    # e2b: urlencode({quote(k): quote(v)}) → one query value, decoded once more by the server.
    assert _metadata_filter("run%3D1%26user%3Da%2520b") == {"run": "1", "user": "a b"}
    assert _metadata_filter(None) == {}
    assert _offset("20") == 20 and _offset(None) == 0
    with pytest.raises(E2bError):
        _offset("abc")


def test_end_events_follow_envd():
    assert end_event(0, False) == {"end": {"exited": True, "status": "exit status 0"}}
    assert end_event(3, False)["end"] == {"exited": True, "status": "exit status 3", "exitCode": 3,
                                          "error": "exit status 3"}
    assert end_event(None, True)["end"]["exitCode"] == -1


def test_entry_info_is_proto_json():
    info = entry_info(FileInfo(name="a", path="/tmp/a", type="file", size=5, mode=0o644, mtime=0))
    assert info == {"name": "a", "type": "FILE_TYPE_FILE", "path": "/tmp/a", "size": "5", "mode": 0o644,
                    "permissions": "-rw-r--r--", "modifiedTime": "1970-01-01T00:00:00Z"}
    link = entry_info(FileInfo(name="l", path="/l", type="symlink", size=1, mode=0o777, mtime=0))
    assert link["isSymlink"] is True and link["type"] == "FILE_TYPE_SYMLINK"


def test_paths_resolve_against_the_users_home():
    assert Envd("sb", "t", "user").path("x/y") == "/home/user/x/y"
    assert Envd("sb", "t", "root").path("x") == "/root/x"
    assert Envd("sb", "t", "user").path("/a/../b") == "/b"
    assert Envd("sb", "t", "user").path("") == "/home/user"


class _Req:
    def __init__(self, headers):
        self.headers = headers


def test_user_selection_from_basic_auth():
    assert user_of(_Req({})) == "user"
    assert user_of(_Req({"authorization": "Basic cm9vdDo="})) == "root"  # "root:"
    with pytest.raises(E2bError):
        user_of(_Req({"authorization": "Basic bm9ib2R5Og=="}))  # "nobody:"
