"""An fsx-style exerciser: a few files in one directory of the filesystem under test, every
operation applied both to the real files and to an in-memory model (one ``bytearray`` per name),
and the two compared.

Used by ``test_fsx.py`` twice: by a hypothesis state machine (the rules draw the *raw* parameters
with strategies and call the methods here) and by a seeded ``random.Random`` sequence
(:func:`random_step` draws the same raw parameters). The methods resolve raw parameters against
the current model (an offset "inside" the file, "at EOF", "just past EOF", ...), so both drivers
share one definition of every operation.

Like fsx, each :class:`Fsx` keeps one ``O_RDWR`` descriptor per existing name; a failed check
raises :class:`FsxFailure` whose message ends with the recent operations log (offsets in hex,
as fsx prints them) and the first differing byte.
"""

from __future__ import annotations

import functools
import mmap
import os
import random
import shutil
from collections import Counter, deque
from pathlib import Path

KiB = 1024
MiB = 1024 * KiB
BLOCK = 4096
PAGE = mmap.ALLOCATIONGRANULARITY  # mmap offsets must be multiples of this
MAX_OFFSET = 8 * MiB  # no write starts, and no truncate goes, past this
MAX_LEN = 256 * KiB  # longest single write/read/mmap access
MAX_SIZE = MAX_OFFSET + MAX_LEN  # hence no file grows past this
NAMES = ("f0", "f1", "f2")

# raw-parameter vocabularies shared by both drivers ("low" is the first MiB: most files stay a
# few MiB, "far" reaches MAX_OFFSET and leaves large holes)
WRITE_WHERE = ("inside", "inside", "eof", "near", "low", "low", "far")
READ_WHERE = ("inside", "inside", "cross", "beyond", "any")
TRUNC_HOW = ("down", "down", "up", "up", "any", "zero", "same")
FILLS = ("random", "random", "random", "zero", "byte")
LEN_RANGES = ((1, 4096), (1, 64 * KiB), (1, MAX_LEN))
RAW_MAX = 2**32 - 1

# operations run by every Fsx (and "ops", "runs", "bytes_written", "bytes_read"), for reports
TOTALS: Counter[str] = Counter()


def initial_size(rng: random.Random) -> int:
    """A file's size at the start of a run: empty, small, or a few MiB."""
    return rng.choice((0, rng.randint(1, 64 * KiB), rng.randint(1, 4 * MiB)))


class FsxFailure(AssertionError):
    pass


def align_down(x: int) -> int:
    return x - x % BLOCK


def align_up(x: int) -> int:
    return -(-x // BLOCK) * BLOCK


def pattern(length: int, seed: int, fill: str) -> bytes:
    if fill == "zero":
        return bytes(length)
    if fill == "byte":
        return bytes([seed % 255 + 1]) * length  # never 0: distinguishable from a hole
    return random.Random(seed).randbytes(length)


def _op(fn):
    """Count the operation; on any error mark the exerciser failed (teardown then skips the
    full comparison instead of masking the first error) and attach the operations log to an
    OSError."""

    @functools.wraps(fn)
    def wrapper(self: Fsx, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except FsxFailure:
            self.failed = True
            raise
        except OSError as e:
            self.failed = True
            raise FsxFailure(f"{fn.__name__}: {e!r}{self.context()}") from e
        except BaseException:
            self.failed = True
            raise

    return wrapper


class Fsx:
    def __init__(self, directory: str | os.PathLike, nfiles: int, seed: int,
                 initial_sizes: tuple[int, ...] = ()) -> None:
        """``nfiles`` names are created; the i-th gets ``initial_sizes[i]`` bytes of data."""
        assert 1 <= nfiles <= len(NAMES)
        self.dir = Path(directory)
        self.dir.mkdir()
        self.names = NAMES[:nfiles]
        self.model: dict[str, bytearray] = {}
        self.fds: dict[str, int] = {}
        self.rng = random.Random(seed)  # only for choosing the ranges the cheap checks sample
        self.log: deque[str] = deque(maxlen=30)
        self.ops: Counter[str] = Counter()
        self.nops = 0
        self.bytes_written = 0
        self.bytes_read = 0
        self.last: tuple[str, int, int] | None = None  # (name, offset, length) last touched
        self.failed = False
        for name in self.names:
            self.create(name)
        for i, size in enumerate(initial_sizes[:nfiles]):
            if size:
                self._write("write", self.names[i], 0, min(size, MAX_SIZE), False, seed + i, "random")

    # ----- bookkeeping ----------------------------------------------------------------------
    def path(self, name: str) -> str:
        return str(self.dir / name)

    def existing(self) -> list[str]:
        return sorted(self.model)

    def missing(self) -> list[str]:
        return [n for n in self.names if n not in self.model]

    def pick(self, which: int, nonempty: bool = False) -> str:
        """The ``which``-th existing name (modulo); with ``nonempty``, among the non-empty files
        if there are any (operations that need data do not waste themselves on empty files)."""
        names = self.existing()
        if nonempty:
            names = [n for n in names if self.model[n]] or names
        return names[which % len(names)]

    def note(self, kind: str, text: str) -> None:
        self.nops += 1
        self.ops[kind] += 1
        TOTALS[kind] += 1
        TOTALS["ops"] += 1
        self.log.append(f"{self.nops:5d} {kind:<10} {text}")

    def context(self) -> str:
        sizes = ", ".join(f"{n}={len(b):#x}" for n, b in sorted(self.model.items()))
        return (f"\n  dir {self.dir}; model sizes: {sizes}\n  last operations (newest last):\n    "
                + "\n    ".join(self.log))

    def fail(self, msg: str) -> None:
        self.failed = True
        raise FsxFailure(msg + self.context())

    def compare(self, name: str, off: int, expected: bytes, got: bytes, how: str) -> None:
        if got == expected:
            return
        n = min(len(got), len(expected))
        first = next((i for i in range(n) if got[i] != expected[i]), n)
        ndiff = sum(1 for i in range(n) if got[i] != expected[i])
        at = off + first
        self.fail(
            f"{how} of {name} at {off:#x} (+{len(expected):#x}): "
            f"got {len(got):#x} bytes, expected {len(expected):#x}; first difference at {at:#x} "
            f"(page {at // BLOCK:#x}, in-page {at % BLOCK:#x}), {ndiff:#x} differing bytes in the "
            f"common part\n  expected {bytes(expected[first:first + 16]).hex(' ')}"
            f"\n  got      {bytes(got[first:first + 16]).hex(' ')}"
        )

    def _pread(self, name: str, off: int, length: int) -> bytes:
        got = os.pread(self.fds[name], length, off)
        self.bytes_read += len(got)
        return got

    def _check_range(self, name: str, off: int, length: int, how: str) -> None:
        expected = bytes(self.model[name][off:off + length])
        self.compare(name, off, expected, self._pread(name, off, length), how)

    def _check_size(self, name: str, how: str) -> None:
        size = len(self.model[name])
        st = os.fstat(self.fds[name])
        if st.st_size != size:
            self.fail(f"{how}: fstat({name}).st_size = {st.st_size:#x}, model {size:#x}")
        st_path = os.stat(self.path(name))
        if st_path.st_size != size:
            self.fail(f"{how}: stat({name}).st_size = {st_path.st_size:#x}, model {size:#x}")
        if st_path.st_ino != st.st_ino:
            self.fail(f"{how}: {name} names inode {st_path.st_ino}, its descriptor has {st.st_ino}")

    # ----- operations -----------------------------------------------------------------------
    @_op
    def create(self, name: str) -> None:
        assert name not in self.model
        fd = os.open(self.path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self.fds[name] = fd
        self.model[name] = bytearray()
        self.note("create", name)
        self._check_size(name, "create")

    @_op
    def create_missing(self, idx: int) -> None:
        missing = self.missing()
        if missing:
            self.create(missing[idx % len(missing)])

    def _write(self, kind: str, name: str, off: int, length: int, aligned: bool, seed: int,
               fill: str, grow: bool = True) -> None:
        buf = self.model[name]
        if aligned:
            off, length = align_down(off), max(BLOCK, align_up(length))
        off = min(off, MAX_OFFSET)
        if not grow:
            length = min(length, len(buf) - off)
        data = pattern(length, seed, fill)
        old = len(buf)
        self.note(kind, f"{name} {off:#x} thru {off + length - 1:#x} ({length:#x} bytes) {fill}"
                        f"{' aligned' if aligned else ''}"
                        f"{f' past EOF {old:#x} (hole {off - old:#x})' if off > old else ''}")
        n = os.pwrite(self.fds[name], data, off)
        self.bytes_written += n
        if n != length:
            self.fail(f"short write to {name} at {off:#x}: {n:#x} of {length:#x} bytes")
        end = off + length
        if end > len(buf):
            buf.extend(bytes(end - len(buf)))
        buf[off:end] = data
        self.last = (name, off, length)

    @_op
    def write(self, which: int, where: str, off_raw: int, len_raw: int, aligned: bool, seed: int,
              fill: str) -> None:
        """Write anywhere: inside the file, at EOF, just past EOF (a hole), or far (up to 8 MiB)."""
        name = self.pick(which)
        size = len(self.model[name])
        off = {
            "inside": off_raw % (size + 1),
            "eof": size,
            "near": size + off_raw % MAX_LEN,
            "low": off_raw % MiB,
            "far": off_raw % MAX_OFFSET,
        }[where]
        self._write("write", name, off, len_raw, aligned, seed, fill)

    @_op
    def overwrite(self, which: int, off_raw: int, len_raw: int, aligned: bool, seed: int,
                  fill: str) -> None:
        """Rewrite part of the existing contents (never grows the file)."""
        name = self.pick(which, nonempty=True)
        size = len(self.model[name])
        if size == 0:
            self.note("skip", f"overwrite {name}: empty")
            return
        off = off_raw % size
        if aligned:
            off = align_down(off)
        self._write("overwrite", name, off, len_raw, aligned, seed, fill, grow=False)

    @_op
    def read(self, which: int, where: str, off_raw: int, len_raw: int, aligned: bool) -> None:
        """pread and compare; ranges may cross or lie past EOF (short/empty read expected)."""
        name = self.pick(which)
        size = len(self.model[name])
        length = len_raw
        off = {
            "inside": off_raw % (size + 1),
            "cross": max(0, size - off_raw % (length + 1)),
            "beyond": size + off_raw % MAX_LEN,
            "any": off_raw % MAX_SIZE,
        }[where]
        if aligned:
            off, length = align_down(off), max(BLOCK, align_up(length))
        self.note("read", f"{name} {off:#x} thru {off + length - 1:#x} ({length:#x} bytes)"
                          f"{' aligned' if aligned else ''} size {size:#x}")
        self._check_range(name, off, length, "read")
        self.last = (name, off, length)

    @_op
    def truncate(self, which: int, how: str, raw: int, aligned: bool) -> None:
        name = self.pick(which)
        buf = self.model[name]
        size = len(buf)
        new = {
            "down": raw % (size + 1),
            "up": size + raw % MiB,
            "any": raw % MAX_OFFSET,
            "zero": 0,
            "same": size,
        }[how]
        if aligned:
            new = align_down(new)
        new = min(new, MAX_SIZE)
        self.note("truncate", f"{name} from {size:#x} to {new:#x} ({'up' if new > size else 'down'})")
        os.ftruncate(self.fds[name], new)
        if new < size:
            del buf[new:]
        else:
            buf.extend(bytes(new - size))
        # the classic fsx catch: stale data past a truncated EOF (in its last page) reappearing
        # when the file is extended again; read the boundary now
        lo = max(0, min(size, new) - BLOCK)
        self._check_range(name, lo, 2 * BLOCK, "read around the truncation point")

    def _map_range(self, name: str, off_raw: int, len_raw: int) -> tuple[int, int] | None:
        """(offset, length) inside the file; None when it is empty (nothing can be mapped)."""
        size = len(self.model[name])
        if size == 0:
            return None
        off = off_raw % size
        return off, min(len_raw, size - off)

    @_op
    def mmap_read(self, which: int, off_raw: int, len_raw: int) -> None:
        name = self.pick(which, nonempty=True)
        rng = self._map_range(name, off_raw, len_raw)
        if rng is None:
            self.note("skip", f"mmap_read {name}: empty")
            return
        off, length = rng
        moff = off - off % PAGE
        self.note("mmap_read", f"{name} {off:#x} thru {off + length - 1:#x} ({length:#x} bytes)"
                               f" map {moff:#x}+{off + length - moff:#x}")
        with mmap.mmap(self.fds[name], off + length - moff, flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ, offset=moff) as mm:
            got = mm[off - moff:off - moff + length]
        self.bytes_read += length
        self.compare(name, off, bytes(self.model[name][off:off + length]), got, "mmap read")
        self.last = (name, off, length)

    @_op
    def mmap_write(self, which: int, off_raw: int, len_raw: int, seed: int, fill: str) -> None:
        """Store through a MAP_SHARED mapping, msync(MS_SYNC) it, unmap; within the current size."""
        name = self.pick(which, nonempty=True)
        rng = self._map_range(name, off_raw, len_raw)
        if rng is None:
            self.note("skip", f"mmap_write {name}: empty")
            return
        off, length = rng
        moff = off - off % PAGE
        data = pattern(length, seed, fill)
        self.note("mmap_write", f"{name} {off:#x} thru {off + length - 1:#x} ({length:#x} bytes)"
                                f" {fill} map {moff:#x}+{off + length - moff:#x}")
        with mmap.mmap(self.fds[name], off + length - moff, flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=moff) as mm:
            mm[off - moff:off - moff + length] = data
            mm.flush()  # msync(MS_SYNC) of the whole mapping
        self.bytes_written += length
        self.model[name][off:off + length] = data
        self.last = (name, off, length)

    @_op
    def rename(self, src_which: int, dst_idx: int, keep_target_open: bool) -> None:
        """rename(src, dst): dst (if it exists) is replaced, src disappears, src's open descriptor
        follows the inode. With ``keep_target_open`` the replaced file's descriptor stays open
        across the rename and must still read its old contents (an open, unlinked inode)."""
        src = self.pick(src_which)
        dst = self.names[dst_idx % len(self.names)]
        replaced = dst in self.model and dst != src
        self.note("rename", f"{src} -> {dst}"
                            f"{f' replacing {len(self.model[dst]):#x} bytes' if replaced else ''}"
                            f"{' (target kept open)' if replaced and keep_target_open else ''}")
        old_fd = old_buf = None
        if replaced:
            old_fd, old_buf = self.fds.pop(dst), self.model.pop(dst)
            if not keep_target_open:
                os.close(old_fd)
                old_fd = None
        try:
            os.rename(self.path(src), self.path(dst))
            if src != dst:
                self.model[dst] = self.model.pop(src)
                self.fds[dst] = self.fds.pop(src)
                if os.path.lexists(self.path(src)):
                    self.fail(f"rename {src} -> {dst}: {src} still exists")
            self._check_size(dst, "rename")
            if old_fd is not None:
                st = os.fstat(old_fd)
                if st.st_size != len(old_buf) or st.st_nlink != 0:
                    self.fail(f"rename {src} -> {dst}: replaced file's descriptor has size "
                              f"{st.st_size:#x} (expected {len(old_buf):#x}), nlink {st.st_nlink}")
                if old_buf:
                    off = self.rng.randrange(len(old_buf))
                    self.compare(dst, off, bytes(old_buf[off:off + 64 * KiB]),
                                 os.pread(old_fd, 64 * KiB, off), "read of the replaced (unlinked) file")
        finally:
            if old_fd is not None:
                os.close(old_fd)
        self.last = (dst, 0, 0)

    @_op
    def sync(self, which: int, data_only: bool) -> None:
        name = self.pick(which)
        self.note("fdatasync" if data_only else "fsync", name)
        (os.fdatasync if data_only else os.fsync)(self.fds[name])

    @_op
    def reopen(self, which: int, drop_cache: bool) -> None:
        """Close and reopen by name; with ``drop_cache`` first fdatasync and
        posix_fadvise(DONTNEED) so the reads after the reopen come from the filesystem rather
        than the page cache, and compare the whole file."""
        name = self.pick(which)
        self.note("reopen", f"{name}{' dropping its page cache' if drop_cache else ''}")
        fd = self.fds.pop(name)
        try:
            if drop_cache:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        self.fds[name] = os.open(self.path(name), os.O_RDWR)
        self._check_size(name, "reopen")
        if drop_cache:
            self._check_file(name, "read after reopen")
        else:
            self._sample(name, "read after reopen", ranges=3)

    # ----- checks ---------------------------------------------------------------------------
    def _sample(self, name: str, how: str, ranges: int = 1) -> None:
        size = len(self.model[name])
        for _ in range(ranges):
            off = self.rng.randrange(size + BLOCK)
            self._check_range(name, off, self.rng.randint(1, 16 * KiB), how)
        if self._pread(name, size, 1) != b"":
            self.fail(f"{how}: read at EOF {size:#x} of {name} returned data")

    def _check_file(self, name: str, how: str) -> None:
        size = len(self.model[name])
        for off in range(0, size, MiB):
            self._check_range(name, off, MiB, how)
        if self._pread(name, size, BLOCK) != b"":
            self.fail(f"{how}: read at EOF {size:#x} of {name} returned data")

    @_op
    def check_quick(self) -> None:
        """After every operation: names, sizes (fstat and stat), a sampled range of every file
        and the range the last operation touched (at most 64 KiB of it)."""
        listed = sorted(os.listdir(self.dir))
        if listed != self.existing():
            self.fail(f"directory lists {listed}, model has {self.existing()}")
        for name in self.existing():
            self._check_size(name, "check")
            self._sample(name, "sampled read")
        if self.last is not None and self.last[0] in self.model:
            name, off, length = self.last
            self._check_range(name, off, min(length, 64 * KiB), "re-read of the last range")

    @_op
    def check_full(self) -> None:
        for name in self.existing():
            self._check_size(name, "full check")
            self._check_file(name, "full comparison")

    def finish(self) -> None:
        """Full comparison (unless a check already failed), close, remove the directory."""
        try:
            if not self.failed:
                self.check_full()
        finally:
            for fd in self.fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.fds.clear()
            TOTALS["bytes_written"] += self.bytes_written
            TOTALS["bytes_read"] += self.bytes_read
            TOTALS["runs"] += 1
        if not self.failed:
            shutil.rmtree(self.dir)

    def summary(self) -> str:
        return (f"{self.nops} ops, {self.bytes_written / MiB:.1f} MiB written, "
                f"{self.bytes_read / MiB:.1f} MiB read: "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items())))


# ----- the seeded driver ------------------------------------------------------------------------
# relative weights of the operations in a seeded run
WEIGHTS = {
    "write": 24, "overwrite": 10, "read": 16, "truncate": 8, "mmap_read": 6, "mmap_write": 6,
    "rename": 4, "sync": 5, "reopen": 5, "create": 4,
}


def seeded_fsx(directory: str | os.PathLike, seed: int) -> tuple[Fsx, random.Random]:
    """An exerciser for a seeded run (2 or 3 files of random initial sizes) and its generator."""
    rng = random.Random(seed)
    nfiles = rng.randint(2, 3)
    sizes = tuple(initial_size(rng) for _ in range(nfiles))
    return Fsx(directory, nfiles, seed, sizes), rng


def random_step(fsx: Fsx, rng: random.Random) -> None:
    """One operation with parameters drawn from ``rng`` over the same vocabularies the
    hypothesis rules use."""

    def length() -> int:
        return rng.randint(*rng.choice(LEN_RANGES))

    which, raw, seed = rng.randrange(len(NAMES)), rng.randint(0, RAW_MAX), rng.randint(0, RAW_MAX)
    kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    if kind == "create" and not fsx.missing():
        kind = "write"
    if kind == "write":
        fsx.write(which, rng.choice(WRITE_WHERE), raw, length(), rng.random() < 0.5, seed,
                  rng.choice(FILLS))
    elif kind == "overwrite":
        fsx.overwrite(which, raw, length(), rng.random() < 0.5, seed, rng.choice(FILLS))
    elif kind == "read":
        fsx.read(which, rng.choice(READ_WHERE), raw, length(), rng.random() < 0.5)
    elif kind == "truncate":
        fsx.truncate(which, rng.choice(TRUNC_HOW), raw, rng.random() < 0.5)
    elif kind == "mmap_read":
        fsx.mmap_read(which, raw, length())
    elif kind == "mmap_write":
        fsx.mmap_write(which, raw, length(), seed, rng.choice(FILLS))
    elif kind == "rename":
        fsx.rename(which, rng.randrange(len(NAMES)), rng.random() < 0.3)
    elif kind == "sync":
        fsx.sync(which, rng.random() < 0.5)
    elif kind == "reopen":
        fsx.reopen(which, rng.random() < 0.3)
    else:
        fsx.create_missing(which)
