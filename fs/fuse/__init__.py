"""The FUSE adapter: pyfuse3 requests translated to :class:`traxfs.fs.filesystem.FileSystem`
calls (``operations``), the trio loop that serves them (``loop``), mount options built without
paths (``options``) and serving a mount from open to clean close (``mount``). It only
translates; the filesystem's rules — the ``/.trax`` status files and every other subtree
included — live below it."""
