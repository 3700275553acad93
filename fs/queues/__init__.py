"""Aurora queues on the engine: one stored copy per queue, many views, history and replay.

``store`` (the set of queues), ``queue`` (one queue: appends, persistence, views, retention),
``block`` (the on-device block format), ``index`` (its records in B+trees), ``reader``
(views' streams and sealed segments), ``producer`` (an append file's partial lines), ``cache``
(blocks in memory and read-ahead), ``records`` (what a record is), ``config`` (settings),
``check`` (fsck's queue pass), ``status`` (status.json); everything the store asks of the
engine goes through ``fs/rawstore`` (shared with the table store).
"""
