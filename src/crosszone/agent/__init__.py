"""crosszone.agent package."""
