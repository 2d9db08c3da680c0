"""crosszone_lab.emulate package."""
