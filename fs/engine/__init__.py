"""The transactional page engine (SPEC §3): Stasis semantics with Aether logging.

Bottom to top: ``page`` (the page format), ``slotted``/``fixed`` (page layouts), ``logrecord``
(log record format), ``logstore`` (the circular log region on the volume), ``logmanager`` (log
buffer, flush daemon, group commit, durability handles), ``buffer`` (buffer manager enforcing
write-ahead), ``ops`` (operation registry), ``locks`` (lock manager), ``xact`` (transactions,
nested top actions), ``recovery`` (ARIES), ``alloc`` (regions, pages, records) and ``engine``
(the façade that opens, formats, checkpoints and closes).
"""
