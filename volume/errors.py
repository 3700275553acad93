"""Errors of the volume manager.

Every error names the device or object it is about, so that an operator reading the message
knows what to look at, and what is damaged.
"""


class VolumeError(Exception):
    """Base class: a volume-manager operation was refused; nothing was changed."""


class DeviceError(VolumeError):
    """A device could not be opened, read or written, or is too small."""


class LabelError(VolumeError):
    """A device's label is missing, foreign, damaged or of an unknown version."""


class MetadataError(VolumeError):
    """Volume-group metadata is damaged, stale or inconsistent between devices."""


class MissingDeviceError(MetadataError):
    """A device that the volume group's metadata lists was not found."""


class StaleDeviceError(MetadataError):
    """A device carries an older metadata sequence number than the rest of its group."""


class ForeignDeviceError(VolumeError):
    """A device belongs to another volume group (or to none, where one was expected)."""


class UsageError(VolumeError):
    """A request was malformed: bad name, size, layout or option."""


class NoSpaceError(VolumeError):
    """Not enough free extents in the volume group for the request."""


class OccupiedError(VolumeError):
    """A device (or logical volume) holds something the request would destroy — a traxfs
    filesystem, a physical volume label, another known signature; ``--force`` overrides."""


class InUseError(VolumeError):
    """A device, logical volume or volume group is in use by another process (or open here);
    no option overrides it."""
