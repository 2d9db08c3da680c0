"""ECMP bucket tables by rendezvous (highest random weight) hashing.

Each bucket goes to the member with the highest hash of (member, bucket). Removing a member only
moves the buckets it owned, and adding one only takes buckets from others: flows on the other
members keep their next hop (Thaler and Ravishankar, 1998; the same idea as Maglev's table).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def _weight(name: str, bucket: int) -> int:
    digest = hashlib.blake2b(f"{name}\x00{bucket}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_buckets(members: Sequence[tuple[str, int]], n_buckets: int) -> tuple[int, ...]:
    """Bucket -> member value for members given as (stable name, value). Empty -> all zero."""
    if not members:
        return (0,) * n_buckets
    return tuple(max(members, key=lambda m: (_weight(m[0], b), m[0]))[1] for b in range(n_buckets))
