"""The volume manager: devices, labels, volume-group metadata, layouts, logical volumes.

Start from :class:`~traxfs.volume.group.VolumeGroup` (create/open/change groups and their
logical volumes) and :class:`~traxfs.volume.logical.OpenLogicalVolume` (the I/O interface upper
layers use).
"""
