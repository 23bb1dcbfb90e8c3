"""POSIX semantics over the metadata engine and the tiers, independent of FUSE."""
