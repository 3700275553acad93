# The B+tree's in-page search and descent (ext/nodesearch.pyx), shared with ext/treeleaf.pyx,
# whose put and delete inside one leaf search from C.

from .pagepin cimport PinTable

cdef int leaf_lookup(const unsigned char *b, Py_ssize_t size, const unsigned char *probe, Py_ssize_t plen,
                     Py_ssize_t *idx, Py_ssize_t *n_out, Py_ssize_t *voff, Py_ssize_t *vlen) except -1
cdef object descend_to_leaf(PinTable table, object pin, object pid, bytes key, int inner_type, list path)
cdef list leaf_run(const unsigned char *b, Py_ssize_t size, Py_ssize_t i, object stop, bint *ended)
