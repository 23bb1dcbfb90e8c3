"""A separate client process with its own RemoteFlashTier: puts or gets deterministic blocks.

    python tier_client.py put|get SERVER[,SERVER...] SECRET_FILE FIRST COUNT SIZE
prints one JSON line: what it did, what it found, and its view of the servers.
"""

import json
import sys
from pathlib import Path

from blocks import content

from aifs.flash.tier import RemoteFlashTier
from aifs.rdma.auth import Secret


def main(mode: str, servers: str, secret_file: str, first: int, count: int, size: int) -> None:
    tier = RemoteFlashTier(servers.split(","), replicas=2, transport="tcp", timeout=2.0, read_bound=4.0,
                           secret=Secret.from_file(Path(secret_file)))
    ids = range(first, first + count)
    report: dict = {"mode": mode}
    if mode == "put":
        for block_id in ids:
            tier.put(block_id, content(block_id, size))
    else:
        got = {block_id: tier.get(block_id) for block_id in ids}
        report["missing"] = [b for b, data in got.items() if data is None]
        report["wrong"] = [b for b, data in got.items() if data is not None and data != content(b, size)]
        report["read"] = sum(data is not None for data in got.values())
    report["status"] = tier.status()
    tier.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]))
