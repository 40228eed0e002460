"""The JSON lines of a streamed exec (corral_node_agent.sandboxes.router._line)."""

import json

from corral_common.contracts.exec import ExecChunk, ExecResult
from corral_node_agent.sandboxes.router import _line


def test_output_chunks_leave_out_what_they_have_not():
    assert json.loads(_line(ExecChunk(type="stdout", data="hi\n", encoding="utf-8"))) == {
        "type": "stdout", "data": "hi\n", "encoding": "utf-8"}


def test_the_exit_chunk_of_a_timed_out_command_carries_its_whole_result():
    """issue 34: a timed-out command's exit chunk left out ``exit_code`` (null dropped with the
    chunk's other unset fields): clients reading it as ``POST /exec``'s result crashed. It is
    that result, null exit code and all."""
    result = ExecResult(exit_code=None, stdout="", stderr="", duration_ms=1000.0, timed_out=True)
    line = json.loads(_line(ExecChunk(type="exit", result=result)))
    assert line == {"type": "exit", "result": result.model_dump(mode="json")}
    assert line["result"]["exit_code"] is None and line["result"]["timed_out"] is True
    assert ExecChunk.model_validate(line).result == result  # what the api's e2b relay reads back
