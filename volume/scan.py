"""Reading what is on the registered devices: labels and metadata copies, without changing them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .device import Device, check_image_size, create_image
from .disk.geometry import DiskSpec
from .errors import DeviceError, LabelError, UsageError
from .label import Label, new_label, read_labels, write_label
from .locks import WRITE_HINT, device_lock
from .metadata_area import ORPHAN_FORMAT, Copy, SlotState, newest, read_slots, write_slots
from .model import Geometry
from .open_device import open_device
from .registry import Registry
from .signature import Finding, identify, refuse_unless_forced, wipe_leftovers
from .simdevice import create_simulated


@dataclass
class ScannedDevice:
    path: str
    device: Device | None = None
    label: Label | None = None
    slots: list[SlotState] = field(default_factory=list)
    error: str | None = None  # why the device or its label could not be read
    label_problems: list[str] = field(default_factory=list)  # damaged label copies (one is intact)
    findings: list[Finding] = field(default_factory=list)  # what identify() saw, when a writer asked

    @property
    def copy(self) -> Copy | None:
        return newest(self.slots)

    @property
    def problems(self) -> list[str]:
        return [s.problem for s in self.slots if s.problem]

    @property
    def vg_name(self) -> str | None:
        c = self.copy
        return c.doc.get("name") if c and c.doc.get("format") != ORPHAN_FORMAT else None

    @property
    def vg_uuid(self) -> str | None:
        c = self.copy
        return c.doc.get("uuid") if c and c.doc.get("format") != ORPHAN_FORMAT else None

    @property
    def orphan(self) -> bool:
        c = self.copy
        return self.label is not None and c is not None and c.doc.get("format") == ORPHAN_FORMAT

    def close(self) -> None:
        if self.device is not None:
            self.device.close()
            self.device = None


def scan_one(path: str) -> ScannedDevice:
    sd = ScannedDevice(path)
    try:
        sd.device = open_device(path)
        sd.label, sd.label_problems = read_labels(sd.device)
        sd.slots = read_slots(sd.device, sd.label)
    except (DeviceError, LabelError, OSError) as e:
        sd.error = str(e)
    return sd


def scan(registry: Registry) -> list[ScannedDevice]:
    return [scan_one(p) for p in registry.paths()]


def pv_create(registry: Registry, path: str, size: int | None = None, unit: int | None = None,
              model: DiskSpec | None = None, force: bool = False) -> Label:
    """Label a device (creating a sparse image file of ``size`` bytes if asked) and register it.

    With ``model``, a new simulated disk of that model is created at ``path`` instead (image of
    the disk's capacity plus its model sidecar) and labelled with the model's zoned geometry.
    An existing device is locked exclusively (refused while anything has it open: a mount, a
    group in use) and identified first: anything on it — a traxfs label, even an unused one, a
    traxfs filesystem, a foreign signature — is refused by name, writing nothing, unless
    ``force``; then the label is written and what is left of foreign signatures is wiped.
    """
    if unit is not None and (unit < 4096 or unit & (unit - 1)):
        raise UsageError(f"track unit {unit} must be a power of two of at least 4096 bytes")
    exists = os.path.exists(path)
    if model is not None:
        if size is not None or unit is not None:
            raise UsageError("--model sets the size and geometry; do not combine it with --size or --unit")
        if exists:
            raise UsageError(f"{path}: already exists; --model creates a new simulated disk image")
        return label_device(registry, path, create_simulated(path, model), Geometry.zoned(model, "profile"))
    geometry = Geometry(unit=unit or Geometry.unit)
    if not exists:
        if size is None:
            raise DeviceError(f"{path}: no such device; give --size to create an image file")
        return label_device(registry, path, create_image(path, size), geometry)
    if size is not None:
        if not os.path.isfile(path):
            raise UsageError(f"{path}: --size applies to image files, not to block devices")
        check_image_size(path, size)
    with device_lock(path, exclusive=True, hint=WRITE_HINT):
        dev = open_device(path)
        try:
            findings = identify(dev, path, path)
            refuse_unless_forced(path, findings, force)
            if size is not None and dev.size < size:  # grow the image only once labelling is decided
                os.ftruncate(dev.fd, size)
                dev.size = size
        except BaseException:
            dev.close()
            raise
        return label_device(registry, path, dev, geometry, erase=bool(findings))


def label_device(registry: Registry, path: str, dev: Device, geometry: Geometry, erase: bool = False) -> Label:
    """Write a fresh label and orphan metadata (``geometry``) on ``dev``, close it, register it.
    ``erase``: the device held something (forced): wipe what is left of foreign signatures."""
    try:
        label = new_label(dev)
        write_slots(dev, label, 0, {"format": ORPHAN_FORMAT, "geometry": geometry.__dict__})
        write_label(dev, label)
        if erase:
            wipe_leftovers(dev, path, path)
            dev.flush()
    finally:
        dev.close()
    registry.add(path)
    return label
