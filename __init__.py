"""traxfs: a storage stack for one machine, from raw disks up to Spark.

The top-level folders are the layers (SPEC §1), bottom to top: ``ext`` (Cython hot paths),
``volume`` (the Atropos-style volume manager), ``fs`` (engine, structures, namespace, FUSE) and
``tools`` (the ``trax`` command). A layer imports only from the layers below it.
"""

__version__ = "0.1.0"
