"""The remote flash tier: block servers on flash nodes, and the client tier that spreads blocks over them.

Server side: `store` (blocks on disk with a byte budget), `server` (the network
front), `requests` (checking each request), `limits` and `budget` (what clients
may hold of it). Client side: `ring` (placement), `endpoint` and `health` (retries and
circuit breakers), `erasure` (RS(k,m) shards), `tier` (RemoteFlashTier).
"""
