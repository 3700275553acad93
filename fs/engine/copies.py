"""Serving a good copy when the bytes read fail their check: the mirror's other legs.

The volume below cannot tell good bytes from bad; the layers that checksum what they store can.
When a page (an engine page, or a file's data page) fails its check, the reader asks the device
for every copy it holds (``read_copies``: one per in-sync leg of a mirror), takes the first
that passes, and writes it over every copy that differs (``repair_copy``), so the damaged leg
is healed by the read that found it. A device with one copy (an image file, a plain volume)
has nothing to choose from: the damage is reported to the caller, never served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...volume.contract import DeviceContract

log = logging.getLogger("traxfs.engine")


def good_copy(dev: DeviceContract, offset: int, length: int, ok: Callable[[bytes], bool],
              what: str) -> tuple[bytes, list[int]] | None:
    """A copy of ``[offset, offset+length)`` that passes ``ok``, and the legs rewritten with it;
    None if the device has no copy that passes. ``what`` names the bytes in log lines."""
    copies = dev.read_copies(offset, length)
    if len(copies) < 2:  # the one copy is the one that failed
        return None
    good = next((data for _, data in copies if ok(data)), None)
    if good is None:
        return None
    repaired = []
    for leg, data in copies:
        if data != good:
            dev.repair_copy(leg, offset, good)
            repaired.append(leg)
            log.warning("%s: leg %d held a damaged copy (device offset %d); rewritten from a good leg",
                        what, leg, offset)
    return good, repaired
