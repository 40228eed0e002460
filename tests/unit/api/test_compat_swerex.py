"""SWE-ReX adapter: models as SWE-ReX's own, session names, the driver's outputs (pure logic)."""

import pytest
from pydantic import TypeAdapter, ValidationError

from corral_api.compat.swerex import schemas, sessions
from corral_common.contracts.exec import ExecResult


def test_models_accept_what_the_swerex_client_sends():
    abstract = pytest.importorskip("swerex.runtime.abstract")
    action = TypeAdapter(schemas.Action)
    for theirs in (abstract.BashAction(command="ls", timeout=3, check="silent"), abstract.BashInterruptAction()):
        ours = action.validate_python(theirs.model_dump())
        assert ours.model_dump() == theirs.model_dump()
    for ours, theirs in ((schemas.CreateBashSessionRequest, abstract.CreateBashSessionRequest),
                         (schemas.Command, abstract.Command), (schemas.ReadFileRequest, abstract.ReadFileRequest),
                         (schemas.WriteFileRequest, abstract.WriteFileRequest),
                         (schemas.BashObservation, abstract.BashObservation),
                         (schemas.CommandResponse, abstract.CommandResponse)):
        assert set(ours.model_fields) == set(theirs.model_fields), ours


def test_session_names_name_a_directory_only():
    assert schemas.CreateBashSessionRequest(session="my-session.2").session == "my-session.2"
    for bad in ("../x", "a/b", "", ".hidden", "x" * 65, "a b"):
        with pytest.raises(ValidationError):
            schemas.CreateBashSessionRequest(session=bad)


def test_driver_exec_and_outputs():
    req = sessions.driver_exec("run", "default", "tok", timeout_s=2.5, output_limit=100, stdin="echo hi")
    assert req.cmd[:2] == ["/bin/sh", "-c"] and req.cmd[5:10] == ["run", "/tmp/.corral-swerex/default", "tok",
                                                                  "2.5", "100"]
    assert req.timeout_s == 12.5 and req.stdin == "echo hi" and req.user == "root"
    result = ExecResult(exit_code=0, stdout="out", stderr="noise\n7\n", duration_ms=1)
    assert sessions.exit_code_of(result) == 7
    assert sessions.exit_code_of(ExecResult(exit_code=0, stdout="", stderr="", duration_ms=1)) is None
    assert sessions.strip_control_chars("\x1b[31mred\x1b[0m\r\nnext") == "red\nnext"
