"""The liveness pulse's rules (events/pulse.py): when it may beat, what lag it reports."""

import redis

from corral_node_agent.events.pulse import LAG_WINDOW_S, LivenessPulse, LoopWatch


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch(clock: Clock, tick_s: float = 2.0, budget_s: float = 60.0) -> LoopWatch:
    return LoopWatch(tick_s, budget_s, clock=clock)


def test_a_loop_late_by_more_than_a_heartbeat_timeout_but_within_the_budget_may_still_pulse():
    clock = Clock()
    w = watch(clock)
    w.beat()
    clock.now += 25  # the loop blocked: no tick, no full beat
    assert w.may_pulse()
    assert w.stalled_s() == 25
    assert w.lag_s() == 23  # the tick was due after 2 s


def test_a_loop_stalled_past_the_wedge_budget_withholds_the_pulse_until_it_ticks_again():
    clock = Clock()
    w = watch(clock)
    clock.now += 60
    assert w.may_pulse()  # at the budget: still
    clock.now += 0.5
    assert not w.may_pulse()
    w.tick()
    w.beat()
    assert w.may_pulse()


def test_a_ticking_loop_whose_full_beat_stopped_succeeding_withholds_the_pulse_past_the_budget():
    clock = Clock()
    w = watch(clock)
    w.beat()
    for _ in range(31):  # the loop runs, the beat fails (or hangs) for 62 s
        clock.now += 2
        w.tick()
    assert not w.may_pulse()
    w.beat()
    assert w.may_pulse()


def test_beat_returns_the_gap_since_the_previous_full_beat():
    clock = Clock()
    w = watch(clock)
    clock.now += 5  # start-up before the first beat is no gap
    assert w.beat() == 0
    clock.now += 14
    assert w.beat() == 14


def test_the_lag_gauge_keeps_the_worst_tick_of_the_last_window():
    clock = Clock()
    w = watch(clock)
    clock.now += 12
    assert w.tick() == 10  # came 10 s late
    for _ in range(5):
        clock.now += 2
        assert w.tick() == 0
    assert w.lag_s() == 10  # a scrape after the stall ended still sees it
    clock.now += LAG_WINDOW_S
    w.tick()
    assert w.lag_s() == LAG_WINDOW_S - 2  # the old stall left the window; this gap is the worst now
    clock.now += 2
    w.tick()
    clock.now += LAG_WINDOW_S - 1
    w.tick()
    assert w.lag_s() == LAG_WINDOW_S - 3


class RecordingRedis:
    def __init__(self, fail: bool = False):
        self.calls: list[tuple] = []
        self.fail = fail

    def zadd(self, key, mapping, xx=False):
        if self.fail:
            raise redis.ConnectionError("down")
        self.calls.append((key, tuple(mapping), xx))
        return 0


def test_a_pulse_only_refreshes_an_existing_score_and_only_while_the_watch_allows():
    clock = Clock()
    pulse = LivenessPulse("n-1", "redis://127.0.0.1:1/0", watch(clock), interval_s=2, timeout_s=1)
    pulse.redis = RecordingRedis()
    assert pulse.beat_once()
    assert pulse.redis.calls == [("nodes", ("n-1",), True)]  # ZADD XX: never adds the node
    clock.now += 61
    assert not pulse.beat_once()
    assert len(pulse.redis.calls) == 1 and pulse.beats == 1
    pulse.watch.tick()
    pulse.watch.beat()
    assert pulse.beat_once() and pulse.beats == 2


def test_a_pulse_that_redis_refuses_says_so_and_counts_no_beat():
    pulse = LivenessPulse("n-1", "redis://127.0.0.1:1/0", watch(Clock()), interval_s=2, timeout_s=1)
    pulse.redis = RecordingRedis(fail=True)
    assert not pulse.beat_once()
    assert not pulse.beat_once()
    assert pulse.beats == 0
