"""Client side of MCP: environments that offer a gateway's tools to agents.

Nothing re-exported here imports the MCP SDK at import time (see rollout.mcp_client.transport), so
`import envs` stays light for Ray workers; keep it so when adding names.
"""

from envs.http_mcp_env import HttpMCPEnv
from envs.http_mcp_rag_env import HttpMCPRagEnv
from envs.task_session import TaskSession
from rollout.errors import SchemaError
from rollout.mcp_client.schema import input_schema_to_parameters, mcp_tool_to_function
from rollout.records import ToolCallRecord, ToolResult

__all__ = [
    "HttpMCPEnv",
    "HttpMCPRagEnv",
    "SchemaError",
    "TaskSession",
    "ToolCallRecord",
    "ToolResult",
    "input_schema_to_parameters",
    "mcp_tool_to_function",
]
