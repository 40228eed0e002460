"""The Redis store every service shares: sandbox records and their transitions, node heartbeats
and reservations (``state``), the jobs queue (``jobs``), the quota ledger's keys
(``quota_ledger``) and the one way to open Redis (``redis_client``).

The key layout (``sb:<id>``, ``node:<id>``, ``job:<id>``, ``nodes``...) is this package's
alone: the services call the stores' methods and never read or write a key themselves, so a
change of layout (a prefix, a TTL, sharding) is made here and nowhere else.
"""
