"""The FUSE adapter: pyfuse3 requests translated to :class:`traxfs.fs.filesystem.FileSystem`
calls (``operations``), the trio loop that serves them (``loop``), mount options built without
paths (``options``), the ``/.trax`` status files (``status_files``) and serving a mount from open
to clean close (``mount``). It only translates; the filesystem's rules live below it."""
