"""Every branch kept for what older agents, schedulers or records left behind says when it can
go: a ``compat(<commit>, <date>)`` marker next to it naming the change it bridges and the
condition that deletes it. A new branch that speaks of older agents without one fails here."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TREES = [ROOT / "services", ROOT / "libs"]
# What such a branch says about itself.
SPEAKS_OF_THE_PAST = re.compile(
    r"older agents?\b|agents? from before|nodes? from before|from before (pins|the cap|disks|accounting|VM)"
    r"|written before (the api|pins|the warm)|reservations made before", re.IGNORECASE)
# ... or what such a branch is named (its definition; its callers need no marker of their own).
DEFINES_A_BRIDGE = re.compile(r"^\s*(def _legacy_\w*|LEGACY_\w* =)")
MARKER = re.compile(r"compat\((?P<commits>[^)]*)\)")
COMMIT = re.compile(r"\b[0-9a-f]{7}\b")
NEAR = 4  # lines either side


def _sources():
    for tree in TREES:
        for path in sorted(tree.rglob("*.py")):
            # Foreign wire formats (E2B, SWE-ReX...) and schema migrations are not bridges to delete.
            if "compat" in path.relative_to(ROOT).parts[:4] or "migrations" in path.parts or "versions" in path.parts:
                continue
            yield path, path.read_text().splitlines()


def test_every_branch_for_older_peers_is_marked():
    unmarked = []
    for path, lines in _sources():
        for i, line in enumerate(lines):
            if (SPEAKS_OF_THE_PAST.search(line) or DEFINES_A_BRIDGE.match(line)) and not any(
                    MARKER.search(near) for near in lines[max(0, i - NEAR):i + NEAR + 1]):
                unmarked.append(f"{path.relative_to(ROOT)}:{i + 1}: {line.strip()}")
    assert unmarked == [], "mark each with compat(<commit>, <date>) and when it can go:\n" + "\n".join(unmarked)


def test_each_marker_names_the_change_and_when_it_goes():
    markers = []
    for path, lines in _sources():
        for i, line in enumerate(lines):
            for found in MARKER.finditer(line):
                text = " ".join(lines[i:i + 3])
                markers.append((f"{path.relative_to(ROOT)}:{i + 1}", found.group("commits"), text))
    assert len(markers) >= 10  # the branches marked when the markers came in
    for where, commits, text in markers:
        assert COMMIT.search(commits) and re.search(r"\b20\d\d-\d\d-\d\d\b", commits), where
        assert re.search(r"\b(delete|goes|go once|can go|gone|removable)\b", text), where
