"""crosszone.compile package."""
