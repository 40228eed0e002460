"""The reaper reaps only after it has seen Redis without a break for the heartbeat timeout."""

from corral_scheduler.nodes.service import RedisWatch


def test_steady_only_after_a_timeout_of_unbroken_answers():
    watch = RedisWatch(max_gap_s=5)
    assert not watch.steady_for(10, now=0)  # never answered
    for t in range(0, 11):
        watch.answered(now=t)
    assert watch.steady_for(10, now=10)
    assert not watch.steady_for(11, now=10)


def test_a_gap_longer_than_allowed_starts_the_watch_again():
    """Redis unreachable for 30 s (a restart): every heartbeat is old when it answers again,
    so nothing may be reaped until the nodes had a whole timeout to heartbeat."""
    watch = RedisWatch(max_gap_s=5)
    for t in range(0, 20):
        watch.answered(now=t)
    assert watch.steady_for(10, now=19)
    watch.answered(now=50)  # the first answer after the outage
    assert not watch.steady_for(10, now=50)
    for t in range(51, 60):
        watch.answered(now=t)
    assert not watch.steady_for(10, now=59)
    watch.answered(now=60)
    assert watch.steady_for(10, now=60)


def test_gaps_within_the_allowance_do_not_break_it():
    watch = RedisWatch(max_gap_s=5)
    for t in (0, 4, 8, 12):  # a loaded loop answering every 4 s
        watch.answered(now=t)
    assert watch.steady_for(10, now=12)
