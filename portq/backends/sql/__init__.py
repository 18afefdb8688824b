"""The shared SQL machinery of every engine, split by concern (one layer per module,
each building on the one before):

- :mod:`~portq.backends.sql.session`: configuration, connections, server identity, error
  translation, value conversion, capabilities (the engine hooks' defaults);
- :mod:`~portq.backends.sql.tx`: statements, transactions and their retry policy;
- :mod:`~portq.backends.sql.schema`: migrations, versions, tables, server info;
- :mod:`~portq.backends.sql.enqueue`: inserts, uniqueness scopes, dependencies, announce;
- :mod:`~portq.backends.sql.limits` (policy, no I/O) and :mod:`~portq.backends.sql.claim`;
- :mod:`~portq.backends.sql.outcomes`: fenced writes (renew, complete, fail, ...);
- :mod:`~portq.backends.sql.operators`: maintenance, operator actions, listings, registry;
- :mod:`~portq.backends.sql.backend`: :class:`SqlBackend`, the whole.
"""

from portq.backends.sql.backend import SqlBackend

__all__ = ["SqlBackend"]
