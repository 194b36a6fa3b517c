"""Sweeps (--sweep-rates, --sweep-users): the load shape that steps, and its step table."""
