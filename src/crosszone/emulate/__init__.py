"""crosszone.emulate package."""
