"""Fault tests stop and start servers of their own (tests/control_plane.py), never the shared ones."""

from tests.control_plane import private_broker  # noqa: F401 - fixture
