"""Modelled disks: geometry, mechanics, simulation, extraction."""
