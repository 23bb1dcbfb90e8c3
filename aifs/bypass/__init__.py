"""The mount's side of reads without FUSE: a data socket that tells a reader (aifs.client) where the
bytes of the files it asks for sit on this node, so that it reads them itself.

Each file read through FUSE costs several requests, all served by the mount's one thread, so a
DataLoader reading small files through the mount cannot keep GPUs fed. Over the data socket one
message resolves many paths, with the kernel's permission checks made here, and the bytes move
without the mount: from NVMe segment files the reader reads itself (a root reader gets their
descriptors), or inline in the reply. Whatever this side cannot judge as the kernel would, or does
not hold locally, it answers "fallback": the reader reads that file through the mount.
"""
