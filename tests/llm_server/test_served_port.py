"""The test servers start on a free port found and released first: a port another process takes meanwhile makes the
server exit, and it is started again on another (what once failed a CI-like run: llama-cpp-python's server met
"address already in use")."""

from __future__ import annotations

import sys

import httpx

from rollout.listen import bind_socket
from tests.llm_server.server import served

ANSWERS_ANYTHING = """
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_port_taken_before_the_server_binds_it_is_replaced(tmp_path):
    with bind_socket("127.0.0.1", 0) as taken:
        taken.listen()
        ports: list[int] = []

        def command(port: int) -> list[str]:
            ports.append(port)
            return [sys.executable, "-c", ANSWERS_ANYTHING, str(taken.getsockname()[1] if len(ports) == 1 else port)]

        with served(command, tmp_path / "server.log") as base_url:
            assert httpx.get(f"{base_url}/models").status_code == 200
    assert len(ports) == 2
