"""Layouts of a logical volume: how logical bytes land on devices.

``planner`` decides, at create/extend time, how many stripes and what stripe unit a layout
uses and which physical extents it gets; ``mapping`` turns a logical byte range into device
pieces at I/O time. ``linear``, ``striped`` and ``traxtent`` all map through segments of
stripes; a ``mirror`` is two such legs on disjoint devices.
"""
