"""The third blind set (cases/, README.md) and its dev / held-out split (split.py)."""
