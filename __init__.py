"""traxfs: a storage stack for one machine, from raw disks up to Spark.

The top-level folders are the layers, bottom to top: ``ext`` (Cython hot paths),
``volume`` (the Atropos-style volume manager), ``fs`` (engine, structures, namespace, FUSE) and
``tools`` (the ``trax`` command). A layer imports only from the layers below it.
"""

__version__ = "0.1.0"

# First, before any module below can import pyfuse3: the FUSE operations pyfuse3 lacks (lseek)
# are added by interposing libfuse's fuse_session_new, which works only if this extension is in
# the global symbol scope before pyfuse3's extension is loaded (see ext/fuse_lowlevel.pyx).
from .ext import fuse_lowlevel as _fuse_lowlevel  # noqa: E402, F401
