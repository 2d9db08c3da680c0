"""crosszone.control package."""
