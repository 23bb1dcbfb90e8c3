"""Block transports to the remote flash servers: TCP everywhere, RDMA verbs where a NIC exists.

`transport` holds the interface both implement, `select` picks one at run time.
"""
