"""Data flowing to compute: tell aifs mounts the order files will be read in, and each mount
fetches them onto the node ahead of the reader (docs/prefetch.md). No torch here.

    import aifs
    aifs.prefetch(paths)                          # these files, in this order; replaces the last call
    hint = aifs.dataflow.OrderHint(paths)         # a reader of its own over a fixed list of files
    hint.send(order)                              # each epoch: the order as indices into paths
    hint.end()                                    # done: fetches of files not read yet stop

    aifs.locate(paths)                            # where each file's bytes are: nodes, flash, S3

For PyTorch, aifs.torch.PrefetchSampler wraps a sampler and sends each epoch's hint itself;
aifs.torch.LocalitySampler deals each rank the samples its node holds (docs/locality.md).
"""

from aifs.control.client import ControlError
from aifs.dataflow.hints import OrderHint, prefetch
from aifs.dataflow.locate import Location, locate, node_of

__all__ = ["ControlError", "Location", "OrderHint", "locate", "node_of", "prefetch"]
