"""Canary and guard probes: byte-exact reads of known content, reported to the store."""
