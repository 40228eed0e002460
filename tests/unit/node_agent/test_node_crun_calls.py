"""The container backend's crun calls (backends/container/crun.py), against stand-in
binaries that behave as crun did when a delete lost a race, or as a crun that hangs (logic
only: the real crun runs in the integration tests)."""

import os
import stat

import psutil
import pytest

from corral_node_agent.backends.container.crun import Crun, CrunError


def _stand_in(tmp_path, failures: int) -> Crun:
    """A "crun" whose delete fails ``failures`` times, leaving the container's state dir,
    then removes it; it records each call."""
    root = tmp_path / "crun"
    (root / "sb-1").mkdir(parents=True)
    script = tmp_path / "crun.sh"
    script.write_text(f"""#!/bin/sh
# argv: --root ROOT delete --force ID
echo "$@" >> {tmp_path}/calls
n=$(wc -l < {tmp_path}/calls)
if [ "$n" -le {failures} ]; then echo "open pidfd: No such process" >&2; exit 1; fi
rm -rf "$2/$5"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return Crun(str(script), str(root))


def _calls(tmp_path) -> int:
    return len((tmp_path / "calls").read_text().splitlines())


async def test_a_delete_that_fails_is_tried_again_until_the_state_is_gone(tmp_path):
    crun = _stand_in(tmp_path, failures=2)
    assert await crun.delete("sb-1") == (0, "")
    assert _calls(tmp_path) == 3 and not os.path.exists(tmp_path / "crun" / "sb-1")


async def test_a_delete_that_keeps_failing_reports_the_last_failure(tmp_path):
    crun = _stand_in(tmp_path, failures=5)
    rc, out = await crun.delete("sb-1", attempts=3)
    assert (rc, out) == (1, "open pidfd: No such process")
    assert _calls(tmp_path) == 3 and os.path.isdir(tmp_path / "crun" / "sb-1")


async def test_a_delete_that_succeeds_is_called_once(tmp_path):
    crun = _stand_in(tmp_path, failures=0)
    assert (await crun.delete("sb-1"))[0] == 0
    assert _calls(tmp_path) == 1


async def test_a_call_that_hangs_is_killed_at_its_deadline(tmp_path):
    script = tmp_path / "crun.sh"
    script.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec sleep 600\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    crun = Crun(str(script), str(tmp_path / "crun"), call_timeout_s=0.5)
    with pytest.raises(CrunError, match="crun pause failed .*did not finish within 0.5 s: killed"):
        await crun.pause("sb-1")
    assert not psutil.pid_exists(int((tmp_path / "pid").read_text()))
    # A call that does not check reports it as its result (delete's caller judges that).
    assert (await crun.delete("sb-1", attempts=1))[1] == "did not finish within 0.5 s: killed"
