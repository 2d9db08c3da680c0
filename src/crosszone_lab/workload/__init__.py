"""crosszone_lab.workload package."""
