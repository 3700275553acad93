# Slotted-page edits (ext/slotpage.pyx): the free-space sum and a patch's runs, shared with
# ext/treeleaf.pyx.

cdef Py_ssize_t free_bytes(const unsigned char *p, Py_ssize_t size) except -1
cdef bytes diff_bytes(const unsigned char *old, const unsigned char *new, Py_ssize_t n, Py_ssize_t base)
