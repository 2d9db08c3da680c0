"""crosszone.migrate package."""
