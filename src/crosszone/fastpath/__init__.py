"""crosszone.fastpath package."""
