"""Parts of the namespace served by something other than the POSIX tree: the protocol they
implement (``protocol``), the ``/.trax`` status files (``status_files``) and the ``/.snapshots``
directory (``snapshots``)."""
