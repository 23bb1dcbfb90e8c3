"""aifs for PyTorch (this package imports torch; the rest of aifs never does).

    from aifs.torch import PrefetchSampler
    sampler = PrefetchSampler(DistributedSampler(dataset), paths)   # paths[i]: sample i's file
    loader = DataLoader(dataset, sampler=sampler, num_workers=8)

    from aifs.torch import LocalitySampler          # a DistributedSampler that deals each rank
    sampler = LocalitySampler(dataset, paths=paths)  # the samples its node holds
"""

from aifs.torch.locality import LocalitySampler
from aifs.torch.prefetch import PrefetchSampler

__all__ = ["LocalitySampler", "PrefetchSampler"]
