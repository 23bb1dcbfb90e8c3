"""Immutable blocks in tiers: RAM, local NVMe, and a durable cold store at the bottom."""
