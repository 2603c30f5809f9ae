"""How a run came by its cost tables, as the sweep and what-if footers say it."""

from __future__ import annotations


def tables_built_text(misses: int, loaded: int) -> str:
    """'12 built' or '3 built, 9 read from the disk cache' (misses: tables not already in memory)."""
    built = misses - loaded
    return f"{built} built" + (f", {loaded} read from the disk cache" if loaded else "")
