"""The main job (``trax demo``): what traxfs is for, end to end, on simulated disks.

1. ``stack``: four simulated Atlas 10K III disks, one disk's geometry extracted by probing (and
   checked), a quadrangle volume, mkfs, a real ``trax mount`` daemon;
2. ``events``: producer processes append click/order events to ``/queues/events``; ``lineitem``:
   a Spark batch job ingests TPC-H-like LINEITEM into ``/tables/lineitem`` through its ingest
   folder;
3. ``stream``: Spark Structured Streaming over the queue's sealed segments aggregates per minute
   and key into ``/tables/event_counts``, stopped and restarted once from its checkpoint; the
   totals must equal the generator's, exactly once;
4. ``lineitem``: TPC-H Q1 and Q6 in Spark over the projections they need (and over ``rows.csv``),
   checked against a pure-Python computation;
5. ``snapshot_step``: ``/.snapshots/mid-run`` taken under the producers and the stream, read by
   Spark (its table and queue) while they go on, and read again after: the same counts;
6. ``replay``: a consumer view replays the last seconds from history and catches up to live;
7. unmount, fsck clean; ``disk_time``: the table's scans on the simulated disks and its minipage
   map; ``plots`` and ``run.summary``: the report (``report.json``, PNGs, text).

``run.run`` drives it; ``tools/demo.py`` is the command.
"""
