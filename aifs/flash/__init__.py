"""The remote flash tier: block servers on flash nodes, and the client tier that spreads blocks over them.

Server side: `store` (blocks on disk with a byte budget), `server` (the network
front), `requests` (checking each request), `limits` and `budget` (what clients
may hold of it). Client side: `ring` (placement), `endpoint` (retries, behind each server's
circuit breaker from aifs.tiers.breaker), `erasure` (RS(k,m) shards), `tier` (RemoteFlashTier).
"""
