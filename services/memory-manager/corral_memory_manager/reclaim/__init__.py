"""Proactive reclaim of idle containers' cold memory into compressed swap (zram)."""
