"""The data socket's messages, framed as the control channel's (aifs.control.wire: a 4-byte length,
then a msgpack map). Shared by the mount's server (aifs.bypass) and the reader (aifs.client).

Request: {"v": VERSION, "id": int, "paths": [bytes, ...], "forget": [segment, ...]}
    Paths are relative to the mount's root, with no ".", ".." or empty components, at most
    MAX_PATHS of them. "forget" names segments whose descriptors the reader closed, so that the
    server sends them again when a later answer needs them.

Reply: {"v": VERSION, "id": int, "block_size": int, "files": [answer, ...], "segments": [segment, ...],
        "changes": bool, "board": bool}
    One answer per path, in order; "id" is the request's, so that a reader never takes another
    request's answers for its own (two processes writing to one inherited connection). The descriptors of the segment files named in "segments"
    arrive with the reply's first bytes (SCM_RIGHTS), in that order; only a root reader gets any.
    The first reply of a connection says "changes": its first descriptor, before the segments,
    is the mount's change table (aifs.bypass.changes), for anyone; when it also says "board", the
    next is the answer board (aifs.bypass.board), for root readers only.
    A request the server cannot take gets {"v": VERSION, "error": str}, and the connection closes.

Answers:
    {"errno": int}                          the open through the mount would fail so
    {"fallback": str}                       read this file through the mount (why, for logs)
    {"again": True}                         the reply was full: ask for this path again
    {"size": int, "blocks": [block, ...]}   the file; blocks in file order, holes left out
        with "stamp": [int, ...] when the reader may keep it, and use it again while the change
        table holds the stamp's counters (aifs.bypass.changes)

Block: bytes [offset, offset + length) of an object whose xxh3-64 is "checksum", at file offset
    index * block_size. Either the object is at byte "at" of segment file "segment", "object"
    bytes long, or its bytes are inline in "data". The reader checks every object against its
    checksum: a segment may have changed since the answer (records are dropped, numbers reused).
"""

VERSION = 3
XATTR = b"user.aifs.bypass"  # on the mount's root: the data socket's path
MAX_PATHS = 256  # per request
MAX_PATH_BYTES = 4096
MAX_REQUEST_BYTES = 2 << 20  # room for MAX_PATHS paths of MAX_PATH_BYTES; the server refuses more
MAX_FDS = 64  # segment descriptors per reply; past them, bytes go inline
