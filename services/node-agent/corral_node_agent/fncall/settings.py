"""fncall settings of a node-agent (``CORRAL_FNCALL_*``), nested in ``NodeAgentSettings.fncall``."""

from pydantic import Field

from corral_common.contracts.fncall import RUNTIMES
from corral_common.settings import FncallSettingsBase

DEFAULT_CACHE_DIR = "/var/cache/corral/fncall"


class FncallNodeSettings(FncallSettingsBase):
    enabled: bool = True
    # Seccomp filters are compiled and cached here (the judge tree is built here too by
    # scripts/build_fncall_runtime.py, for the image build and the executor tests).
    cache_dir: str = DEFAULT_CACHE_DIR
    # Host tmpfs for per-call compile dirs (one subdir per node and worker).
    scratch_dir: str = "/dev/shm/corral-fncall"  # noqa: S108 - a root-owned dir the agent creates 0700 per instance
    runtimes: str = ",".join(RUNTIMES)
    # Workers per runtime on this node: the pool grows towards max while calls queue up and
    # shrinks back towards min when idle.
    pool_min: int = 2
    pool_max: int = 8
    # Runs at once over all the runtimes' pools of this node (a call beyond it waits for one to
    # end): with 14 runtimes, pool_max each would let 112 run (and reserve their pids).
    max_running: int = Field(32, ge=1)
    scale_interval_s: float = 1.0
    idle_ticks_to_shrink: int = 10
    pids_max: int = 64
    compile_memory_mb: int = 1024
    # Python workers keep a zygote: an initialised interpreter in a long-lived sandbox that forks
    # per run into fresh namespaces (zygote.py); false: a new sandbox and interpreter per run.
    warm_python: bool = True
    # How often to look for the runtimes' environment in image-service while it is missing.
    rootfs_poll_s: float = 2.0

    @property
    def runtime_names(self) -> list[str]:
        return [r.strip() for r in self.runtimes.split(",") if r.strip()]
