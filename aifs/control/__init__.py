"""The control channel: the `aifs` CLI talks to a running mount over a Unix socket in its state directory."""

SOCKET_NAME = "control.sock"
