"""Modelled disks (SPEC §2, the Atropos issue): geometry, mechanics, simulation, extraction."""
