"""The kernel's OOM killer: who it takes first (``/proc/<pid>/oom_score_adj``)."""


def set_oom_score_adj(value: int) -> bool:
    """This process's (and its future children's) oom_score_adj; False where it may not (a
    lower value needs CAP_SYS_RESOURCE)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write(str(value))
        return True
    except OSError:
        return False
