# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The disk model's service-time loop in C (the trace replay calls it millions of times).

A line-by-line mirror of ``Mechanics.service`` in ``volume/disk/mechanics.py``, which stays the
reference: same rules, same floating-point operations in the same order, so both give identical
breakdowns (tests/test_disk_model.py checks it). Python's float ``%`` (result takes the divisor's
sign) is reproduced explicitly, since ``cdivision`` gives C's ``fmod``.

The geometry arrives flattened: the first LBN of every track, the zone table (first track, N,
track skew, cylinder skew), slipped defect slots per track in CSR form, and the seek-time table
indexed by cylinder distance.
"""

from libc.math cimport ceil, fmod

cdef double EPS = 1e-4


cdef inline double pymod(double x, double y) nogil:
    cdef double r = fmod(x, y)
    if r != 0 and ((r < 0) != (y < 0)):
        r += y
    return r


cdef class ServiceKernel:
    cdef long long[::1] starts
    cdef long long[::1] zone_first
    cdef long long[::1] zone_n
    cdef long long[::1] zone_h
    cdef long long[::1] zone_c
    cdef long long[::1] defect_tracks
    cdef long long[::1] defect_ptr
    cdef long long[::1] defect_slots
    cdef double[::1] seek
    cdef long long tracks, zones, ndefect_tracks, surfaces
    cdef double head_switch, rev
    cdef readonly long long capacity

    def __init__(self, starts, zone_first, zone_n, zone_h, zone_c, defect_tracks, defect_ptr,
                 defect_slots, seek, long long surfaces, double head_switch, double rev):
        self.starts = starts
        self.zone_first, self.zone_n, self.zone_h, self.zone_c = zone_first, zone_n, zone_h, zone_c
        self.defect_tracks, self.defect_ptr, self.defect_slots = defect_tracks, defect_ptr, defect_slots
        self.seek = seek
        self.tracks = self.starts.shape[0] - 1
        self.zones = self.zone_first.shape[0]
        self.ndefect_tracks = self.defect_tracks.shape[0]
        self.capacity = self.starts[self.tracks]
        self.surfaces, self.head_switch, self.rev = surfaces, head_switch, rev

    cdef inline long long track_of(self, long long lbn) nogil:
        cdef long long lo = 0, hi = self.tracks + 1, mid  # bisect_right(starts, lbn) - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if lbn < self.starts[mid]:
                hi = mid
            else:
                lo = mid + 1
        return lo - 1

    cdef inline long long zone_of(self, long long t) nogil:
        cdef long long z = self.zones - 1
        while z > 0 and self.zone_first[z] > t:
            z -= 1
        return z

    cdef inline long long skew_offset(self, long long t, long long z) nogil:
        cdef long long rel = t - self.zone_first[z]
        cdef long long cyl = rel // self.surfaces, head = rel % self.surfaces
        return (cyl * ((self.surfaces - 1) * self.zone_h[z] + self.zone_c[z]) + head * self.zone_h[z]) % self.zone_n[z]

    cdef inline long long slot_of(self, long long t, long long lbn) nogil:
        cdef long long i = lbn - self.starts[t], lo = 0, hi = self.ndefect_tracks, mid, k
        while lo < hi:  # find t among the defective tracks
            mid = (lo + hi) >> 1
            if self.defect_tracks[mid] < t:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.ndefect_tracks and self.defect_tracks[lo] == t:
            for k in range(self.defect_ptr[lo], self.defect_ptr[lo + 1]):
                if self.defect_slots[k] <= i:
                    i += 1
                else:
                    break
        return i

    cdef inline double move(self, long long a, long long b) nogil:
        if a == b:
            return 0.0
        cdef long long ca = a // self.surfaces, sa = a % self.surfaces
        cdef long long cb = b // self.surfaces, sb = b % self.surfaces
        if ca == cb:
            return self.head_switch
        cdef double s = self.seek[cb - ca if cb > ca else ca - cb]
        if sa != sb and self.head_switch > s:
            return self.head_switch
        return s

    def move_ms(self, long long a, long long b):
        return self.move(a, b)

    def service(self, long long lbn, long long count, double start, long long head_track, double overhead):
        """(end, seek, rotation, switches, transfer, end_track) of one request."""
        if count <= 0 or lbn < 0 or lbn + count > self.capacity:
            raise ValueError(f"request [{lbn}, {lbn + count}) is outside the disk (capacity {self.capacity})")
        cdef long long track = self.track_of(lbn), pos = lbn, end = lbn + count, here, s0, s1, n, z, slots, first
        cdef double seek = self.move(head_track, track)
        cdef double t = start + overhead + seek
        cdef double rotation = 0.0, switches = 0.0, transfer = 0.0, rev = self.rev
        cdef double x, cost, dur, xfer, sw
        while True:
            here = (end if end < self.starts[track + 1] else self.starts[track + 1]) - pos
            if here > 0:
                s0 = self.slot_of(track, pos)
                s1 = self.slot_of(track, pos + here - 1)
                z = self.zone_of(track)
                n = self.zone_n[z]
                slots = s1 - s0 + 1
                first = (s0 + self.skew_offset(track, z)) % n
                x = pymod(pymod(t, rev) * <double>n / rev - <double>first, <double>n)
                if x < EPS or <double>n - x < EPS:
                    cost = <double>slots
                elif x < slots:
                    cost = <double>n + ceil(x - EPS) - x
                else:
                    cost = <double>n - x + <double>slots
                dur = cost * rev / <double>n
                xfer = <double>here * rev / <double>n
                transfer += xfer
                rotation += dur - xfer
                t += dur
                pos += here
            if pos >= end:
                break
            sw = self.move(track, track + 1)
            switches += sw
            t += sw
            track += 1
        return t, seek, rotation, switches, transfer, track
