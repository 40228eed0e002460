"""The line under a job's bars: why its queued sandboxes wait, and where it stands."""

from corral.cli.job import waiting_line


def test_nothing_queued_says_nothing():
    assert waiting_line({"pending": 0, "waiting_reason": "stale", "queue_position": None}) == ""


def test_the_reason_and_the_position():
    info = {"pending": 5, "waiting_reason": "waiting for room: node-1 full (memory)", "queue_position": 2}
    assert waiting_line(info) == "waiting for room: node-1 full (memory) · 2 job(s) ahead"
    assert waiting_line({**info, "queue_position": 0}).endswith("· admitted next")


def test_an_older_api_without_a_reason_still_shows_the_position():
    assert waiting_line({"pending": 3, "queue_position": 1}) == "1 job(s) ahead"
