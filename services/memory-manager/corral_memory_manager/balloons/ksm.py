"""KSM policy: the scanner runs while the node holds at least ``min_same_image`` VMs of one
environment, and stops when it no longer does.

QEMU marks guest RAM mergeable by default (``mem-merge=on``), so the only lever is the host's
``/sys/kernel/mm/ksm/run``. Identical guests share their kernel, page cache of the same image
and zero pages (HOST-NOTES: two identical 512 MiB guests, ~190 MiB saved, visible in PSS; ksmd
~26% of a core while merging, 1-3% after). A scanner that was already running when the manager
started is the host's choice: it is never stopped. One the manager started is stopped again,
with the pages-to-scan rate it found restored (merged pages stay merged until written).
"""

from collections import Counter

from corral_common.logging import get_logger
from corral_memory_manager.host.schemas import KsmUpdate
from corral_memory_manager.host.service import HostMemoryService

log = get_logger(__name__)


def ksm_wanted(environments: list[str], min_same_image: int) -> bool:
    counts = Counter(e for e in environments if e)
    return bool(counts) and max(counts.values()) >= min_same_image


class KsmPolicy:
    def __init__(self, host: HostMemoryService, min_same_image: int, pages_to_scan: int) -> None:
        self.host, self.min_same_image, self.pages_to_scan = host, min_same_image, pages_to_scan
        self.started_by_us = False
        self._found_pages_to_scan: int | None = None

    def apply(self, environments: list[str]) -> bool | None:
        """Start or stop the scanner for the VMs seen; True/False when it changed it, None if not."""
        state = self.host.ksm()
        if not state.present:
            return None
        wanted = ksm_wanted(environments, self.min_same_image)
        if wanted and state.run == 0:
            self._found_pages_to_scan = state.pages_to_scan
            self.host.set_ksm(KsmUpdate(run=1, pages_to_scan=self.pages_to_scan))
            self.started_by_us = True
            log.info("ksm.started", vms=len(environments), pages_to_scan=self.pages_to_scan)
            return True
        if not wanted and self.started_by_us and state.run == 1:
            self.host.set_ksm(KsmUpdate(run=0, pages_to_scan=self._found_pages_to_scan or None))
            self.started_by_us = False
            log.info("ksm.stopped", vms=len(environments))
            return False
        return None
