"""The transactional page engine: Stasis semantics with Aether logging.

Bottom to top: ``page`` (the page format), ``slotted`` (the slotted page layout; fixed-size
records are ``record_store``'s FIXED layout), ``logrecord`` (log record format), ``logstore``
(the circular log region on the device), ``logmanager`` (log buffer, flush daemon, group commit,
durability handles, log barriers), ``buffer`` (buffer manager enforcing write-ahead), ``copies``
(a good copy of damaged bytes from a mirror's other legs), ``opcodes`` (operation registry),
``locks`` (lock manager), ``xact`` (transactions, nested top actions), ``recovery`` (ARIES
analysis and redo), ``undo`` (rollback: aborts, savepoints, recovery's losers), ``alloc``
(regions and pages), ``record_store`` (records on pages), ``raw`` (pages used without headers,
for bytes written outside the log), ``superblock``, ``engine`` (the façade that opens, formats,
checkpoints and closes, and the public face everything above uses), ``check`` (the engine's
fsck) and ``resize`` (growing into a larger device).

The engine imports nothing above it: the structures built on it register their operations
(``opcodes.register``) and checkers (``check.register_checker``) when they are imported.
"""
