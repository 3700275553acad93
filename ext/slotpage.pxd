# Slotted-page edits (ext/slotpage.pyx): the free-space sum, shared with ext/treeleaf.pyx.

cdef Py_ssize_t free_bytes(const unsigned char *p, Py_ssize_t size) except -1
