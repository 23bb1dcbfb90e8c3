"""aifs: a POSIX filesystem for AI training clusters."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`aifs.prefetch` and `aifs.locate` are loaded on first use, so that `import aifs` stays cheap."""
    if name in ("prefetch", "locate"):
        import aifs.dataflow

        return getattr(aifs.dataflow, name)
    raise AttributeError(f"module 'aifs' has no attribute {name!r}")
