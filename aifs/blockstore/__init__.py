"""The block store of a volume, composed from its config: the tiers of aifs.tiers, with the flash
servers' client (aifs.flash over aifs.rdma) and the peers of a shared volume as its remote tiers.
It sits above all three so that the tiers know the remote ones only by their protocol."""
