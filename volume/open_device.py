"""Opening whatever a path holds: a block device, a simulated disk (an image with a disk-model
sidecar) or a plain image file. Its own module because it knows both the plain devices
(``device.py``) and the simulated disk (``simdevice.py``), which is built on them."""

from __future__ import annotations

import os
import stat

from .device import BlockDevice, Device, ImageFileDevice
from .errors import DeviceError
from .simdevice import SimulatedDevice, sidecar_path


def open_device(path: str) -> Device:
    """Open an existing device: a block device if ``path`` is one, a simulated disk if the image
    has a disk-model sidecar (``<path>.disk.json``), otherwise an image file."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DeviceError(f"{path}: {e.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        return BlockDevice(path)
    if stat.S_ISREG(st.st_mode):
        if os.path.exists(sidecar_path(path)):
            return SimulatedDevice(path)
        return ImageFileDevice(path)
    raise DeviceError(f"{path}: neither a block device nor a regular file")
