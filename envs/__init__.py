"""Client side of MCP: environments that offer a gateway's tools to agents."""

from envs.http_mcp_env import HttpMCPEnv
from envs.http_mcp_rag_env import HttpMCPRagEnv
from envs.records import ToolCallRecord, ToolResult
from envs.task_session import TaskSession
from envs.schema import SchemaError, input_schema_to_parameters, mcp_tool_to_function

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
