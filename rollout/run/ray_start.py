"""How a run starts its own Ray: without two head processes it never uses, and without a one-second wait.

`ray.init(address="local")` starts, besides the GCS and the raylet, two more Python processes on the head:
- the dashboard's, which with `include_dashboard=False` loads Ray's usage-stats module alone, and whose address
  `ray.init` waits for (about a second on two cores, on every run's critical path);
- the autoscaler's monitor, where a run's own Ray is one machine with fixed resources.
Each imports Ray on the cores the run's gateway and workers start on. Ray has no setting for either, so while a run
starts its own Ray the `Node` methods that start them start nothing. A user who wants Ray's dashboard starts Ray
themselves (`ray start --head`) and joins it with `ray.address=auto`: a Ray the run joins is left as it is.

`ray.init` then waits for the raylet to register with the GCS by asking the GCS through an accessor that sleeps a
whole second between tries (`GlobalStateAccessor::GetNode`); the raylet registers once its agents are up, about a
second after it starts, so a try that comes just too early costs most of a second. While a run starts its own Ray,
that wait first asks the GCS every 50 ms.

Where a Ray version lacks what is replaced here, Ray starts as it would.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

UNUSED_HEAD_PROCESSES = ("start_monitor", "start_api_server")
"""The methods of Ray's `Node` that start the head processes a run's own Ray goes without."""
NODE_POLL_S = 0.05
"""How often the GCS is asked whether the raylet has registered."""
NODE_WAIT_S = 10.0
"""How long it is asked so, before Ray's own wait (with its own timeout and error) takes over."""


@contextlib.contextmanager
def lean_start() -> Iterator[None]:
    """Within it, `ray.init(address="local")` starts Ray as the module docstring says."""
    from ray._private import node, services

    swaps: list[tuple[Any, str, Any]] = [
        (node.Node, name, _start_nothing) for name in UNUSED_HEAD_PROCESSES if hasattr(node.Node, name)]
    if hasattr(services, "get_node"):
        swaps.append((services, "get_node", _get_node_soon(services.get_node)))
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in swaps]
    for owner, name, replacement in swaps:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def _start_nothing(self: Any, *args: Any, **kwargs: Any) -> None:
    """In place of a `Node` method that starts a head process a run does not use."""


def _get_node_soon(get_node: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    """Ray's `services.get_node`, called once the GCS lists the node as alive (asked every `NODE_POLL_S`)."""

    def wait_then_get(gcs_address: str, node_id: str) -> Any:
        try:
            from ray._raylet import GcsClient
            from ray.core.generated.gcs_pb2 import GcsNodeInfo

            client = GcsClient(address=gcs_address)
            deadline = time.monotonic() + NODE_WAIT_S
            while time.monotonic() < deadline:
                alive = client.get_all_node_info(timeout=NODE_WAIT_S, state_filter=GcsNodeInfo.GcsNodeState.ALIVE)
                if any(known.hex() == node_id for known in alive):
                    break
                time.sleep(NODE_POLL_S)
        except Exception as err:  # noqa: BLE001 - only a shortcut: Ray's own wait follows, with its own errors
            logger.debug("Waiting for the raylet in short steps failed (%s); Ray's own wait follows", err)
        return get_node(gcs_address, node_id)

    return wait_then_get
