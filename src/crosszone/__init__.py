"""crosszone: an XDP-offloaded VPC gateway between a GPU compute zone and a storage zone."""

__version__ = "0.1.0"
