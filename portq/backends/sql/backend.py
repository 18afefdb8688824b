""":class:`SqlBackend`: the DB-API implementation of :class:`portq.protocol.Backend` shared
by every engine, assembled from the layers of this package (each builds on the one
before: session, tx, schema, enqueue, claim, outcomes, operators)."""

from __future__ import annotations

from portq.backends.sql.operators import Operators


class SqlBackend(Operators):
    """Protocol operations driven by the named statements of ``dialects/<engine>/``.

    An engine module subclasses it and overrides only hooks named in
    :class:`portq.backends.contract.EngineHooks`: how to connect, its paramstyle, how a
    transaction starts, how driver errors map to :class:`ErrorKind`, how values convert,
    and (where the engine's SQL cannot express an operation in one statement) the few
    statement runners it replaces."""
