"""The syscall profiles and /proc masks, pinned: what each kind refuses and with which errno,
how the one rule list renders as OCI JSON (the BPF generator compiles that same JSON), and
the cache key of the compiled program."""

import dataclasses
import errno
from pathlib import Path

from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.isolation import procfs
from corral_node_agent.isolation.policy import policy_for
from corral_node_agent.isolation.seccomp import (
    ALLOWED,
    CONTAINER_DEFAULT,
    DENIED,
    FNCALL_DEFAULT,
    LINEAR,
    NO_FILTER,
    OBSOLETE,
    PROFILES,
    SANDBOX_LOCAL,
    TREE,
    Rule,
)
from corral_node_agent.settings import NodeAgentSettings
from tests.unit.node_agent import oci_config

# Refused with EPERM by every profile. A change here is a change of the security posture.
WANT_DENIED = {
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "lookup_dcookie", "syslog", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "userfaultfd", "mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node",
    "migrate_pages", "move_pages", "memfd_secret", "process_madvise", "name_to_handle_at", "open_by_handle_at",
    "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "swapon", "swapoff", "quotactl", "quotactl_fd", "acct", "fanotify_init", "unshare", "setns",
    "reboot", "sethostname", "setdomainname", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl",
    "ioperm", "modify_ldt", "vhangup", "kcmp", "pidfd_getfd",
}
NS_FLAGS = [0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000]
EAFNOSUPPORT, EPROTONOSUPPORT = errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT


def _arg(index, value, op="EQ", value_two=0):
    return {"index": index, "value": value, "valueTwo": value_two, "op": f"SCMP_CMP_{op}"}


def _sock(errno_ret, *args):
    rule = {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno_ret}
    if errno_ret is None:
        rule = {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ALLOW"}
    return rule | {"args": list(args)}


# Everything after the two name lists: clone, personality, socket/socketpair.
WANT_CONDITIONAL = [
    {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [_arg(0, 0x7E020000, "MASKED_EQ", 0)]},
    *({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
       "args": [_arg(0, flag, "MASKED_EQ", flag)]} for flag in NS_FLAGS),
    # (clone3 -> ENOSYS is the default: not rendered)
    *({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [_arg(0, p)]}
      for p in (0, 8, 0x20000, 0x20008, 0xFFFFFFFF)),
    _sock(None, _arg(0, 1)), _sock(None, _arg(0, 2)), _sock(None, _arg(0, 10)),
    _sock(None, _arg(0, 16), _arg(2, 5, "LT")),
    _sock(EPROTONOSUPPORT, _arg(0, 16), _arg(2, 5, "GE")),
    *(_sock(EAFNOSUPPORT, _arg(0, f)) for f in (0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15)),
    _sock(EAFNOSUPPORT, _arg(0, 17, "GE")),
]


def test_one_named_profile_per_kind():
    assert set(PROFILES) == {"container-default", "fncall-default"}
    assert PROFILES["container-default"] is CONTAINER_DEFAULT and PROFILES["fncall-default"] is FNCALL_DEFAULT
    assert NO_FILTER.to_oci() is None  # VMs: QEMU's own -sandbox


def test_container_default_profile_json():
    oci = CONTAINER_DEFAULT.to_oci()
    assert (oci["defaultAction"], oci["defaultErrnoRet"]) == ("SCMP_ACT_ERRNO", errno.ENOSYS)
    assert "architectures" not in oci  # native ABI only: int 0x80 syscalls are killed
    allowed, denied, *conditional = oci["syscalls"]
    assert allowed == {"names": [*ALLOWED, *SANDBOX_LOCAL], "action": "SCMP_ACT_ALLOW"}
    assert {"ptrace", "process_vm_readv", "process_vm_writev", "chroot"} <= set(allowed["names"])
    assert denied["action"] == "SCMP_ACT_ERRNO" and denied["errnoRet"] == errno.EPERM
    assert set(denied["names"]) == WANT_DENIED and len(denied["names"]) == len(WANT_DENIED)
    assert conditional == WANT_CONDITIONAL


def test_fncall_default_refuses_what_acts_inside_the_sandbox_too():
    container, fncall = CONTAINER_DEFAULT.to_oci(), FNCALL_DEFAULT.to_oci()
    assert fncall["syscalls"][0]["names"] == list(ALLOWED)
    assert set(fncall["syscalls"][1]["names"]) == WANT_DENIED | {"ptrace", "process_vm_readv", "process_vm_writev",
                                                                  "chroot"}
    assert fncall["syscalls"][2:] == container["syscalls"][2:]


def test_names_are_classified_once_and_rules_stay_what_crun_runs():
    names = [*ALLOWED, *DENIED, *SANDBOX_LOCAL, *OBSOLETE]
    assert len(names) == len(set(names))
    conditional = {n for r in CONTAINER_DEFAULT.rules if r.args for n in r.names}
    assert conditional == {"clone", "personality", "socket", "socketpair"}
    assert not conditional & set(names) and "clone3" not in names
    for profile in PROFILES.values():
        unconditional = [n for r in profile.rules if not r.args for n in r.names]
        assert len(unconditional) == len(set(unconditional))  # one action per syscall
        for rule in profile.rules:
            indices = [a.index for a in rule.args]
            # crun turns several comparisons of one argument into alternatives (OR): never write them
            assert len(indices) == len(set(indices)), rule


def test_the_cache_key_follows_the_rules(tmp_path):
    assert CONTAINER_DEFAULT.digest() != FNCALL_DEFAULT.digest()
    fewer = dataclasses.replace(FNCALL_DEFAULT, rules=FNCALL_DEFAULT.rules[:-1])
    other_errno = dataclasses.replace(FNCALL_DEFAULT, rules=(Rule(ALLOWED), Rule(DENIED, errno.EACCES),
                                                             *FNCALL_DEFAULT.rules[2:]))
    digests = {FNCALL_DEFAULT.digest(), fewer.digest(), other_errno.digest()}
    assert len(digests) == 3
    assert FNCALL_DEFAULT.digest() == dataclasses.replace(FNCALL_DEFAULT).digest()  # stable
    assert FNCALL_DEFAULT.digest(LINEAR) != FNCALL_DEFAULT.digest(TREE)  # the layout is part of the key


def test_masked_and_readonly_paths():
    assert {"/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup", "/proc/slabinfo", "/proc/cmdline",
            "/proc/kcore", "/proc/keys", "/sys/firmware"} <= set(procfs.MASKED_PATHS)
    assert set(procfs.READONLY_PATHS) == {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}


def test_fncall_masks_only_what_this_kernel_has_and_a_run_could_read(tmp_path: Path):
    (tmp_path / "acpi").mkdir()
    for name, mode in (("cmdline", 0o444), ("keys", 0o444), ("kpageflags", 0o400), ("slabinfo", 0o400)):
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(mode)
    files, dirs = procfs.present_masks(str(tmp_path))
    assert files == ("/proc/keys", "/proc/cmdline") and dirs == ("/proc/acpi",)


def test_a_precompiled_program_goes_to_crun_as_its_annotation(tmp_path):
    policy = policy_for(SandboxSpec(environment="e"), NodeAgentSettings(node_id="n1", state_dir=str(tmp_path)))
    config = oci_config.build_config("sb-1", policy, env={}, node_id="n1", seccomp_bpf=b"\x06\x00\x00\x00\x00\x00\xff\x7f")
    assert config["annotations"] == {"run.oci.seccomp_bpf_data": "BgAAAAAA/38=",
                                     "org.corral.seccomp.profile": "container-default"}
    assert "seccomp" not in config["linux"]  # crun would parse it on every exec, for nothing
    plain = oci_config.build_config("sb-1", policy, env={}, node_id="n1")
    assert "annotations" not in plain and plain["linux"]["seccomp"] == CONTAINER_DEFAULT.to_oci()
