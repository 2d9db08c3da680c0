"""crosszone.intent package."""
