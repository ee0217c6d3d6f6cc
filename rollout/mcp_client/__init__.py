"""The MCP client both sides use: opening a session over streamable HTTP or SSE, reading its errors, and MCP
tool schemas as OpenAI function specs. The env side (`envs`) and the gateway's proxy and upstream tools import
it without reaching into each other."""
