"""Layouts of a logical volume: how logical bytes land on devices.

``planner`` decides, at create/extend time, how many stripes and what stripe unit a layout
uses and which physical extents it gets; ``mapping`` turns a logical byte range into device
pieces at I/O time. ``linear``, ``striped`` and flat ``traxtent`` map through segments of
stripes (``mapping``); ``quadrangle``, and ``traxtent`` on devices with tracks, map blocks onto
the usable tracks of one zone (``quadrangle``), with dimensions from the one-revolution
constraint (``params``). A ``mirror`` is two legs of any of them on disjoint devices.
"""
