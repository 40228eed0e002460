"""Loops that visit every sandbox of a node (the node-agent's memory samples, the
memory-manager's reclaim pass) run at a fixed interval while a pass is cheap and stretch it
once the node is dense, so that such a loop never takes more than a set share of a core."""


def duty_capped_delay(interval_s: float, pass_s: float, max_duty: float) -> float:
    """Seconds until the next pass: ``interval_s``, stretched so that passes take at most
    ``max_duty`` of a core (a pass of ``pass_s`` then waits ``pass_s / max_duty - pass_s``).
    ``max_duty`` 0: always ``interval_s``. What a pass integrates or judges over the time since
    the last one stays exact, only coarser."""
    return max(interval_s, pass_s / max_duty - pass_s) if max_duty > 0 else interval_s
