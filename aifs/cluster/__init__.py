"""The mounts of a shared volume as one cache: each serves the blocks of its own RAM and NVMe
to the others (`peer_store`, `peers`), and reads the blocks that consistent hashing places on
another mount from that mount rather than from the durable tier."""
