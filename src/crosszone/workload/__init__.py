"""crosszone.workload package."""
