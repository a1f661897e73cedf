"""The process's file descriptors as the Forward server counts them: the soft limit its
connection cap must leave room under, and a spare descriptor held back, freed to accept and
close the connections waiting in the backlog when ``accept()`` runs out."""

from __future__ import annotations

import os


def open_spare() -> int | None:
    """A descriptor to hold back (None when even that one is not to be had)."""
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


def fd_soft_limit() -> int | None:
    """``RLIMIT_NOFILE``'s soft limit; None when unlimited or unknown."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft
