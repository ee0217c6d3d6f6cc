"""A listening socket bound before a server starts, so port 0 gets a free port that can be reported first.

The gateway and the web viewer both serve with uvicorn on a socket bound here; this module imports nothing
heavy, so the viewer starts without loading the MCP SDK."""

from __future__ import annotations

import socket


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving so port 0 gets a free port we can report before uvicorn starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP. Without it
    # every response whose headers and body leave in two writes waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
