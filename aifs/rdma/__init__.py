"""Block transports to the remote flash servers: TCP everywhere, RDMA verbs where a NIC exists.

`transport` holds the interface both implement, `select` picks one at run time
(`auto`: verbs when pyverbs imports and a device is present). Both start
every connection with `auth` (the volume's secret, proved at connect, and a MAC
on every request). TCP: `wire` (frames), `tcp` (threads), `loop_tcp` and
`loopsock` (ranged reads on a trio loop). Verbs: `keys` (key exchange), `pool` and `slots`
(registered memory and how blocks are read from it), `verbs` (the pyverbs
calls), `verbs_transport` (client), `verbs_server` (server half), `device`
(finding pyverbs and a device).

Where each path has run: everything but the pyverbs calls in `verbs` (and the
device opening in `verbs_transport`/`verbs_server`) is tested on machines
without RDMA, the verbs client and server included, with READs simulated as
copies between the exchanged addresses. The calls in `verbs` are checked
against Debian's python3-pyverbs 44 API (names, constructors) but run only
where a device exists, as does the verbs half of the conformance suite.
"""
