"""How a run starts its own Ray: without the head processes it never uses, without Ray's one-second wait for the
raylet, and with Ray's own functions back in place afterwards."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ray._private import node, services

from rollout.paths import PROJECT_ROOT
from rollout.run.ray_start import UNUSED_HEAD_PROCESSES, lean_start

OWN_RAY = """
import json, ray
from ray._private import node, services
from ray._raylet import GcsClient
from ray.core.generated.gcs_pb2 import GcsNodeInfo
from rollout.run.config import compose_run_config
from rollout.run.ray_session import ray_session

asked = []
real_get_node = services.get_node

def get_node(gcs_address, node_id):  # Ray's own wait for the raylet: was it registered when Ray asked?
    alive = GcsClient(address=gcs_address).get_all_node_info(state_filter=GcsNodeInfo.GcsNodeState.ALIVE)
    asked.append(any(known.hex() == node_id for known in alive))
    return real_get_node(gcs_address, node_id)

services.get_node = get_node
methods = {name: getattr(node.Node, name) for name in ("start_monitor", "start_api_server")}
with ray_session(compose_run_config("ray.num_cpus=1").ray):
    processes = sorted(ray._private.worker._global_node.all_processes)
    answer = ray.get(ray.remote(lambda: 42).remote())
restored = services.get_node is get_node and all(getattr(node.Node, n) is m for n, m in methods.items())
print(json.dumps({"processes": processes, "answer": answer, "asked": asked, "restored": restored}))
"""


def test_a_run_s_own_ray_starts_lean_and_leaves_ray_as_it_was():
    proc = subprocess.run([sys.executable, "-c", OWN_RAY], capture_output=True, text=True, cwd=PROJECT_ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert "dashboard" not in seen["processes"] and "monitor" not in seen["processes"], seen
    assert {"gcs_server", "raylet", "log_monitor"} <= set(seen["processes"]), seen
    assert seen["asked"] == [True], "Ray's own wait (a try a second) began before the raylet had registered"
    assert seen["answer"] == 42
    assert seen["restored"]


def replaceable() -> list[object]:
    """What `lean_start` replaces, as it stands now."""
    return [getattr(node.Node, name) for name in UNUSED_HEAD_PROCESSES] + [services.get_node]


def test_ray_s_own_functions_are_back_after_the_start_even_when_it_fails():
    kept = replaceable()
    with pytest.raises(RuntimeError), lean_start():
        assert replaceable() != kept
        raise RuntimeError("ray.init failed")
    assert replaceable() == kept
