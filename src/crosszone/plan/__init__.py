"""crosszone.plan package."""
