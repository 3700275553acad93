# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A table ingest's hot loops in C: CSV text to typed columns, and a column to its PAX minipage.

The rules are those of the Python reference in ``traxfs.fs.tables`` (``ingest.parse_csv_reference``,
``pax.encode_column_reference``), which the tests compare this module with on random schemas and
data; this module imports nothing of the package. Parsing: RFC 4180 records (``,`` between
fields, LF, CRLF or CR between records, ``"``-quoted fields with ``""`` inside), an unquoted
empty field is NULL, a quoted one the empty string. A value spelled the plain way (``-12``,
``3.50``, ``2024-05-01``, ``true``) is converted here; any other spelling goes to the caller's
parser for its column (``fallback``: the reference's own, so the value or the error message is
the same), at most once per distinct text for float64 and timestamp columns.

Errors keep the reference's order: a structural error (:class:`CsvError` at once, wherever it
is) comes before a record with the wrong number of fields (the first), which comes before the
first bad value of the first column, in file order, that has one.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_AsLongLong, PyLong_FromLongLong
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcpy, memset

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    double PyFloat_AsDouble(object o) except? -1.0
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)

cdef enum:
    K_INT32 = 0
    K_INT64 = 1
    K_FLOAT64 = 2
    K_DECIMAL = 3
    K_DATE = 4
    K_TIMESTAMP = 5
    K_BOOL = 6
    K_STRING = 7

KINDS = ("int32", "int64", "float64", "decimal", "date", "timestamp", "bool", "string")
QUOTE_ERROR = "a quote inside an unquoted field, text after a closing quote, or a quote never closed"


class CsvError(ValueError):
    """A file that is not CSV as the table reads it, or a bad field: ``(line, column, reason)``;
    ``column`` is 1-based, the field's place in its record."""

    def __init__(self, line, column, reason):
        self.line, self.column, self.reason = line, column, reason
        super().__init__(f"line {line}, column {column}: {reason}")


cdef struct Field:
    Py_ssize_t start
    Py_ssize_t end
    int quoted
    int pairs  # ``""`` inside a quoted field


cdef inline Py_ssize_t _breaks(const uint8_t *d, Py_ssize_t a, Py_ssize_t b) nogil:
    """Line breaks in d[a:b] (CRLF, LF and CR each one)."""
    cdef Py_ssize_t i, k = 0
    for i in range(a, b):
        if d[i] == 10:
            k += 1
        elif d[i] == 13 and not (i + 1 < b and d[i + 1] == 10):
            k += 1
    return k


cdef Py_ssize_t _field(const uint8_t *d, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t *line, Field *f,
                       Py_ssize_t col) except -1:
    """Read the field at ``pos``: its bounds in ``f``, the position after it (a separator or the
    end); a line break inside a quoted field advances ``line``."""
    cdef Py_ssize_t i, j, last = -1
    cdef const uint8_t *q
    cdef int pairs = 0
    if pos < n and d[pos] == 34:
        i = pos + 1
        while True:
            q = <const uint8_t *> memchr(d + i, 34, n - i)
            if q == NULL:  # never closed: the reference closes at the last "" and stops after it
                if last >= 0:
                    line[0] += _breaks(d, pos + 1, last)
                raise CsvError(line[0], col, QUOTE_ERROR)
            j = q - d
            if j + 1 < n and d[j + 1] == 34:
                pairs += 1
                last = j
                i = j + 2
                continue
            f.start, f.end, f.quoted, f.pairs = pos + 1, j, 1, pairs
            line[0] += _breaks(d, pos + 1, j)
            j += 1
            if j < n and d[j] != 44 and d[j] != 10 and d[j] != 13:
                raise CsvError(line[0], col, QUOTE_ERROR)
            return j
    i = pos
    while i < n:
        if d[i] == 44 or d[i] == 10 or d[i] == 13:
            break
        if d[i] == 34:
            raise CsvError(line[0], col, QUOTE_ERROR)
        i += 1
    f.start, f.end, f.quoted, f.pairs = pos, i, 0, 0
    return i


cdef object _text(const uint8_t *d, Field *f):
    """A field's text (``""`` inside a quoted one made ``"``)."""
    cdef Py_ssize_t i, k = 0
    cdef char *buf
    if not f.pairs:
        return PyUnicode_DecodeUTF8(<const char *> d + f.start, f.end - f.start, NULL)
    buf = <char *> malloc(f.end - f.start)
    if buf == NULL:
        raise MemoryError()
    try:
        i = f.start
        while i < f.end:
            buf[k] = d[i]
            k += 1
            i += 2 if d[i] == 34 else 1
        return PyUnicode_DecodeUTF8(buf, k, NULL)
    finally:
        free(buf)


cdef inline int _digits(const uint8_t *d, Py_ssize_t a, Py_ssize_t b, int64_t *v) nogil:
    """d[a:b] all ASCII digits, at most 18 of them: their value in ``v``, 1; else 0."""
    cdef int64_t acc = 0
    if b - a > 18:
        return 0
    while a < b:
        if d[a] < 48 or d[a] > 57:
            return 0
        acc = acc * 10 + (d[a] - 48)
        a += 1
    v[0] = acc
    return 1


cdef int64_t[19] POW10
POW10[0] = 1
for _i in range(1, 19):
    POW10[_i] = POW10[_i - 1] * 10
cdef int[13] MONTH_DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


cdef inline int _plain_int(const uint8_t *d, Py_ssize_t a, Py_ssize_t b, int kind, int64_t *v) nogil:
    cdef int neg = 0
    if a < b and (d[a] == 43 or d[a] == 45):
        neg = d[a] == 45
        a += 1
    if a == b or not _digits(d, a, b, v):
        return 0
    if neg:
        v[0] = -v[0]
    if kind == K_INT32 and not (-2147483648 <= v[0] <= 2147483647):
        return 0
    return 1


cdef inline int _plain_decimal(const uint8_t *d, Py_ssize_t a, Py_ssize_t b, int scale, int64_t limit,
                               int64_t *v) nogil:
    cdef int neg = 0
    cdef Py_ssize_t w0, w1, f0, f1, i
    cdef int64_t whole = 0, frac = 0
    if a < b and (d[a] == 43 or d[a] == 45):
        neg = d[a] == 45
        a += 1
    w0 = a
    while a < b and 48 <= d[a] <= 57:
        a += 1
    w1 = a
    f0 = f1 = a
    if a < b and d[a] == 46:
        f0 = a + 1
        a = f0
        while a < b and 48 <= d[a] <= 57:
            a += 1
        f1 = a
    if a != b or (w1 == w0 and f1 == f0) or (w1 - w0) + scale > 18:
        return 0
    if f1 - f0 > scale:  # more digits after the point: only zeros may go
        for i in range(f0 + scale, f1):
            if d[i] != 48:
                return 0
        f1 = f0 + scale
    _digits(d, w0, w1, &whole)
    _digits(d, f0, f1, &frac)
    v[0] = whole * POW10[scale] + frac * POW10[scale - (f1 - f0)]
    if v[0] >= limit:
        return 0
    if neg:
        v[0] = -v[0]
    return 1


cdef inline int _plain_date(const uint8_t *d, Py_ssize_t a, Py_ssize_t b, int64_t *v) nogil:
    """``YYYY-MM-DD``: days since 1970-01-01."""
    cdef int64_t y, m, day, era, yoe, doy, doe, mdays
    if b - a != 10 or d[a + 4] != 45 or d[a + 7] != 45:
        return 0
    if not (_digits(d, a, a + 4, &y) and _digits(d, a + 5, a + 7, &m) and _digits(d, a + 8, a + 10, &day)):
        return 0
    if y < 1 or m < 1 or m > 12 or day < 1:
        return 0
    mdays = MONTH_DAYS[m]
    if m == 2 and (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)):
        mdays = 29
    if day > mdays:
        return 0
    if m <= 2:  # days from civil (H. Hinnant)
        y -= 1
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    v[0] = era * 146097 + doe - 719468
    return 1


cdef inline int _plain_bool(const uint8_t *d, Py_ssize_t a, Py_ssize_t b, int64_t *v) nogil:
    if b - a == 4 and d[a] == 116 and d[a + 1] == 114 and d[a + 2] == 117 and d[a + 3] == 101:
        v[0] = 1
        return 1
    if b - a == 5 and d[a] == 102 and d[a + 1] == 97 and d[a + 2] == 108 and d[a + 3] == 115 and d[a + 4] == 101:
        v[0] = 0
        return 1
    return 0


def first_record(const uint8_t[::1] data, Py_ssize_t pos, Py_ssize_t line):
    """The first record at or after ``pos`` that is not a blank line: ``(fields, line it starts
    on, position after it, line after it)``, a field being a str or None (NULL); None if there
    is none."""
    cdef const uint8_t *d = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t n = data.shape[0], start
    cdef Field f
    while pos < n and (d[pos] == 10 or d[pos] == 13):
        pos += 2 if d[pos] == 13 and pos + 1 < n and d[pos + 1] == 10 else 1
        line += 1
    if pos >= n:
        return None
    start = line
    fields = []
    while True:
        pos = _field(d, pos, n, &line, &f, len(fields) + 1)
        fields.append(_text(d, &f) if f.quoted or f.end > f.start else None)
        if pos < n and d[pos] == 44:
            pos += 1
            continue
        if pos < n:
            pos += 2 if d[pos] == 13 and pos + 1 < n and d[pos + 1] == 10 else 1
        return fields, start, pos, line + 1


def parse_rows(const uint8_t[::1] data, Py_ssize_t pos, Py_ssize_t line, specs):
    """The records from ``pos`` (the line ``line``) on, converted: one list of values per field.

    ``specs``: per field of the header, ``(kind, scale, precision, nullable, fallback)`` —
    ``kind`` a name of :data:`KINDS`, ``fallback(text)`` the value of any other spelling or
    ValueError/OverflowError saying why not. ``specs`` None: only check the structure. A blank
    line is a NULL in a one-field file and skipped otherwise. Raises :class:`CsvError`: the
    ``column`` of a bad value is its field's 1-based place, with ``field_error`` True."""
    cdef const uint8_t *d = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t n = data.shape[0], width, i, start_line, nf
    cdef Py_ssize_t bad_line = -1, bad_count = 0
    cdef Field f
    cdef int64_t v
    cdef int ok, kind
    cdef int *kinds = NULL
    cdef int *scales = NULL
    cdef int *nullable = NULL
    cdef int *failed = NULL
    cdef int64_t *limits = NULL
    width = len(specs) if specs is not None else 0
    columns = [[] for _ in range(width)]
    errors = [None] * width
    fallbacks = [s[4] for s in specs] if specs is not None else []
    memos = [{} for _ in range(width)]
    try:
        kinds = <int *> malloc(sizeof(int) * (width + 1))
        scales = <int *> malloc(sizeof(int) * (width + 1))
        nullable = <int *> malloc(sizeof(int) * (width + 1))
        failed = <int *> malloc(sizeof(int) * (width + 1))
        limits = <int64_t *> malloc(sizeof(int64_t) * (width + 1))
        if not (kinds and scales and nullable and failed and limits):
            raise MemoryError()
        for i in range(width):
            kinds[i] = KINDS.index(specs[i][0])
            scales[i] = specs[i][1]
            limits[i] = POW10[specs[i][2]] if kinds[i] == K_DECIMAL else 0
            nullable[i] = 1 if specs[i][3] else 0
            failed[i] = 0
        while pos < n:
            start_line = line
            if d[pos] == 10 or d[pos] == 13:  # a blank line
                pos += 2 if d[pos] == 13 and pos + 1 < n and d[pos + 1] == 10 else 1
                line += 1
                if width == 1 and bad_line < 0 and not failed[0]:
                    if not nullable[0]:
                        failed[0] = 1
                        errors[0] = (start_line, "NULL in a NOT NULL column")
                    else:
                        PyList_Append(columns[0], None)
                continue
            nf = 0
            while True:
                pos = _field(d, pos, n, &line, &f, nf + 1)
                if nf < width and bad_line < 0 and not failed[nf]:
                    kind = kinds[nf]
                    if not f.quoted and f.end == f.start:
                        if nullable[nf]:
                            PyList_Append(columns[nf], None)
                        else:
                            failed[nf] = 1
                            errors[nf] = (start_line, "NULL in a NOT NULL column")
                    elif kind == K_STRING:
                        PyList_Append(columns[nf], _text(d, &f))
                    else:
                        ok = 0
                        if not f.pairs:
                            if kind == K_INT64 or kind == K_INT32:
                                ok = _plain_int(d, f.start, f.end, kind, &v)
                            elif kind == K_DECIMAL:
                                ok = _plain_decimal(d, f.start, f.end, scales[nf], limits[nf], &v)
                            elif kind == K_DATE:
                                ok = _plain_date(d, f.start, f.end, &v)
                            elif kind == K_BOOL:
                                ok = _plain_bool(d, f.start, f.end, &v)
                        if ok:
                            PyList_Append(columns[nf], (v != 0) if kind == K_BOOL else PyLong_FromLongLong(v))
                        else:
                            text = _text(d, &f)
                            memo = memos[nf]
                            value = memo.get(text, memo)
                            if value is memo:
                                try:
                                    value = fallbacks[nf](text)
                                except (ValueError, OverflowError) as ex:
                                    failed[nf] = 1
                                    errors[nf] = (start_line, str(ex))
                                if (kind == K_FLOAT64 or kind == K_TIMESTAMP) and not failed[nf]:
                                    memo[text] = value
                            if not failed[nf]:
                                PyList_Append(columns[nf], value)
                nf += 1
                if pos < n and d[pos] == 44:
                    pos += 1
                    continue
                if pos < n:
                    pos += 2 if d[pos] == 13 and pos + 1 < n and d[pos + 1] == 10 else 1
                line += 1
                break
            if specs is not None and nf != width and bad_line < 0:
                bad_line, bad_count = start_line, nf
    finally:
        free(kinds)
        free(scales)
        free(nullable)
        free(failed)
        free(limits)
    if bad_line >= 0:
        raise CsvError(bad_line, min(bad_count, width) + 1, f"{bad_count} fields where the header has {width}")
    for i in range(width):
        if errors[i] is not None:
            err = CsvError(errors[i][0], i + 1, errors[i][1])
            err.field_error = True
            raise err
    return columns


# ----- a column to its minipage -------------------------------------------------------------------
cdef inline Py_ssize_t _decimal_len(uint64_t a) nogil:
    cdef Py_ssize_t k = 1
    while a >= 10:
        a //= 10
        k += 1
    return k


cdef inline Py_ssize_t _int_len(int64_t v) nogil:
    return _decimal_len(<uint64_t> (-(v + 1)) + 1) + 1 if v < 0 else _decimal_len(<uint64_t> v)


def encode_column(str kind_name, int scale, values):
    """``(minipage, CSV bytes, JSON bytes)`` of one column's values (None: NULL), as
    ``pax.encode_column_reference`` makes them: the NULL bitmap padded to 8 bytes, then the
    fixed-width values (0 for a NULL) or the string offsets and UTF-8 bytes; the sizes are what
    the values print as in the views (a NULL: 0 in CSV, ``null`` in JSON)."""
    cdef list vals = values if type(values) is list else list(values)
    cdef Py_ssize_t rows = len(vals), nb = (((rows + 7) >> 3) + 7) & ~7, i, width, total = 0, size, k
    cdef int kind = KINDS.index(kind_name)
    cdef int64_t iv, csv_n = 0, json_n = 0, nulls = 0
    cdef double fv
    cdef uint8_t *out
    cdef uint8_t *body
    cdef uint32_t *offs
    cdef const char *s
    cdef const uint8_t *u
    cdef Py_ssize_t slen, quotes
    cdef int special
    if kind == K_STRING:
        for i in range(rows):  # sizes first
            v = vals[i]
            if v is None:
                nulls += 1
                continue
            s = PyUnicode_AsUTF8AndSize(v, &slen)
            total += slen
            u = <const uint8_t *> s
            quotes = 0
            special = 0
            json_n += 2 + slen
            for k in range(slen):
                if u[k] < 32:
                    special = special or u[k] == 10 or u[k] == 13
                    json_n += 1 if u[k] in (8, 9, 10, 12, 13) else 5
                elif u[k] == 34:
                    quotes += 1
                    json_n += 1
                elif u[k] == 92:
                    json_n += 1
                elif u[k] == 44:
                    special = 1
            if slen == 0:
                csv_n += 2
            elif special or quotes:
                csv_n += slen + 2 + quotes
            else:
                csv_n += slen
        if total > 0xFFFFFFFF:
            raise OverflowError("a string minipage of more than 4 GiB")
        size = nb + 4 * (rows + 1) + total
    else:
        width = 1 if kind == K_BOOL else 4 if kind == K_INT32 or kind == K_DATE else 8
        size = nb + width * rows
    result = PyBytes_FromStringAndSize(NULL, size)
    out = <uint8_t *> PyBytes_AS_STRING(result)
    memset(out, 0, size)
    body = out + nb
    if kind == K_STRING:
        offs = <uint32_t *> body  # (the bitmap's length is a multiple of 8: aligned)
        offs[0] = 0
        total = 0
        body = body + 4 * (rows + 1)
        for i in range(rows):
            v = vals[i]
            if v is None:
                out[i >> 3] |= 1 << (i & 7)
            else:
                s = PyUnicode_AsUTF8AndSize(v, &slen)
                memcpy(body + total, s, slen)
                total += slen
            offs[i + 1] = <uint32_t> total
        json_n += 4 * nulls
        return result, csv_n, json_n
    for i in range(rows):
        v = vals[i]
        if v is None:
            out[i >> 3] |= 1 << (i & 7)
            nulls += 1
            continue
        if kind == K_FLOAT64:
            fv = PyFloat_AsDouble(v)
            memcpy(body + 8 * i, &fv, 8)
            csv_n += len(repr(v))
            continue
        iv = PyLong_AsLongLong(v)
        if kind == K_INT32 or kind == K_DATE:
            if not (-2147483648 <= iv <= 2147483647):
                raise OverflowError(f"{v} does not fit 4 bytes")
            (<int32_t *> (body + 4 * i))[0] = <int32_t> iv
        elif kind == K_BOOL:
            if not (0 <= iv <= 255):
                raise OverflowError(f"{v} does not fit a byte")
            body[i] = <uint8_t> iv
        else:
            memcpy(body + 8 * i, &iv, 8)
        if kind == K_INT32 or kind == K_INT64:
            csv_n += _int_len(iv)
        elif kind == K_DECIMAL:
            k = _decimal_len(<uint64_t> (-iv if iv < 0 else iv))
            csv_n += (k if k > scale + 1 else scale + 1) + (1 if scale else 0) + (1 if iv < 0 else 0)
        elif kind == K_DATE:
            csv_n += 10
            json_n += 2
        elif kind == K_TIMESTAMP:
            csv_n += 27 if iv % 1000000 else 20
            json_n += 2
        else:
            csv_n += 4 if iv else 5
    return result, csv_n, json_n + csv_n + 4 * nulls
