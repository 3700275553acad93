"""The C log record encoder (``traxfs.ext.logcodec``) against the Python reference
(``traxfs.fs.engine.logrecord.encode``): the same bytes for any fields, and records that decode."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traxfs.ext.logcodec import encode
from traxfs.fs.engine import logrecord

U64 = st.integers(0, (1 << 64) - 1)
U32 = st.integers(0, (1 << 32) - 1)


@given(rtype=st.integers(0, 255), xid=U64, prev=U64, page=U64, opcode=st.integers(0, 65535), undo_next=U64,
       payload=st.binary(max_size=600), epoch=U32, seed=U32, lsn=st.integers(1, 1 << 60))
def test_c_encoder_matches_the_reference_and_decodes(rtype, xid, prev, page, opcode, undo_next, payload, epoch,
                                                     seed, lsn):
    rec = encode(rtype, xid, prev, page, opcode, undo_next, payload, epoch, seed)
    assert rec == logrecord.encode(rtype, xid, prev, page, opcode, undo_next, payload, epoch, seed)
    placed = rec[:8] + lsn.to_bytes(8, "little") + rec[16:]  # as the log buffer stores it
    got = logrecord.decode(placed, lsn, seed)
    assert got is not None and (got.type, got.xid, got.prev_lsn, got.page, got.opcode, got.undo_next,
                                got.payload, got.epoch) == (rtype, xid, prev, page, opcode, undo_next, payload, epoch)


def test_c_encoder_takes_any_buffer():
    assert encode(1, 2, 3, 4, 5, 6, bytearray(b"xyz"), 7, 8) == encode(1, 2, 3, 4, 5, 6, memoryview(b"xyz"), 7, 8)


def test_c_encoder_refuses_bad_fields():
    assert len(encode(1, 0, 0, 0, 0, 0, bytes(logrecord.MAX_PAYLOAD), 0, 0)) == 64 + logrecord.MAX_PAYLOAD
    with pytest.raises(ValueError, match="exceeds the limit"):
        encode(1, 0, 0, 0, 0, 0, bytes(logrecord.MAX_PAYLOAD + 1), 0, 0)
    with pytest.raises(ValueError, match="out of range"):
        encode(256, 0, 0, 0, 0, 0, b"", 0, 0)
    with pytest.raises(ValueError, match="out of range"):
        encode(1, 0, 0, 0, 1 << 16, 0, b"", 0, 0)
    with pytest.raises(OverflowError):
        encode(1, -1, 0, 0, 0, 0, b"", 0, 0)
