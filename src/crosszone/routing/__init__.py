"""crosszone.routing package."""
