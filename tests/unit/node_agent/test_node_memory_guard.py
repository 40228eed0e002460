"""The memory guard's decision (capacity/memory_guard.py): the node cgroup's limit under host pressure."""

from corral_node_agent.capacity.memory_guard import HEADROOM, STEP, decide

MIB = 1024 * 1024
CLAIM, FLOOR = 10_000 * MIB, 1_000 * MIB


def test_plenty_available_holds_the_claim():
    assert decide(available=5_000 * MIB, usage=9_000 * MIB, limit=CLAIM, claim=CLAIM, floor=FLOOR).limit_bytes is None


def test_below_the_floor_the_node_stops_growing():
    d = decide(available=700 * MIB, usage=9_000 * MIB, limit=CLAIM, claim=CLAIM, floor=FLOOR)
    assert d.limit_bytes == 9_000 * MIB + HEADROOM and d.why.startswith("lower")


def test_below_half_the_floor_it_shrinks_a_step_at_a_time():
    d = decide(available=400 * MIB, usage=9_000 * MIB, limit=9_100 * MIB, claim=CLAIM, floor=FLOOR)
    assert d.limit_bytes == 9_000 * MIB - STEP


def test_never_below_what_the_sandboxes_requested():
    d = decide(available=100 * MIB, usage=420 * MIB, limit=CLAIM, claim=CLAIM, floor=FLOOR, requested=400 * MIB)
    assert d.limit_bytes == 400 * MIB


def test_a_lowered_limit_is_never_raised_while_the_host_is_short():
    assert decide(available=900 * MIB, usage=9_500 * MIB, limit=8_000 * MIB, claim=CLAIM, floor=FLOOR).limit_bytes is None


def test_restored_only_at_twice_the_floor():
    between = decide(available=1_500 * MIB, usage=7_000 * MIB, limit=8_000 * MIB, claim=CLAIM, floor=FLOOR)
    assert between.limit_bytes is None  # hysteresis: no flapping around the floor
    back = decide(available=2_000 * MIB, usage=7_000 * MIB, limit=8_000 * MIB, claim=CLAIM, floor=FLOOR)
    assert back.limit_bytes == CLAIM and back.why.startswith("restore")
