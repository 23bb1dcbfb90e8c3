"""aifs: a POSIX filesystem for AI training clusters."""

__version__ = "0.1.0"
