"""What gc found and did: one line per stray object, then a summary with counts and bytes."""

from dataclasses import dataclass, field
from typing import Any

from aifs.units import size


@dataclass
class Stray:
    """An object in the durable tier that no block ref, queued upload or retired block names."""

    block_id: int
    location: str
    size: int
    deleted: bool = False
    error: str = ""

    def line(self) -> str:
        done = "deleted" if self.deleted else f"failed: {self.error}" if self.error else "kept"
        return f"stray object {self.location}: {self.size} bytes ({size(self.size)}), {done}"

    def as_json(self) -> dict[str, Any]:
        return {"block": f"{self.block_id:016x}", "object": self.location, "bytes": self.size,
                "deleted": self.deleted, "error": self.error or None}


@dataclass
class GcReport:
    tier: str
    objects: int = 0
    delete: bool = False
    strays: list[Stray] = field(default_factory=list)

    @property
    def stray_bytes(self) -> int:
        return sum(stray.size for stray in self.strays)

    @property
    def failed(self) -> list[Stray]:
        return [stray for stray in self.strays if stray.error]

    @property
    def exit_code(self) -> int:
        """0: done (strays found without --delete are a finding, not a failure); 1: a delete failed."""
        return 1 if self.failed else 0

    def line(self) -> str:
        found = (f"{len(self.strays)} unreferenced of {self.objects} objects, "
                 f"{self.stray_bytes} bytes ({size(self.stray_bytes)})")
        if not self.strays:
            action = "nothing to do"
        elif not self.delete:
            action = "run with --delete to remove them"
        else:
            action = f"{len(self.strays) - len(self.failed)} deleted, {len(self.failed)} failed"
        return f"aifs gc: {self.tier}: {found}; {action}"

    def as_json(self) -> dict[str, Any]:
        return {"summary": {"tier": self.tier, "objects": self.objects, "strays": len(self.strays),
                            "stray_bytes": self.stray_bytes, "delete": self.delete,
                            "failed": len(self.failed)}}
