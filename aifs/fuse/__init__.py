"""The thin translation from FUSE requests (pyfuse3 on trio) to the volume below."""
