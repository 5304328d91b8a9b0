"""MCP (Model Context Protocol) tools, in one place above the engine: which servers a response
uses and their checks (planning.py), the credentials of a worker's job (credentials.py), and the
session a run calls: the listing/approval prelude and the calls (session.py). The engine knows
only its `McpSession` Protocol (engine/interfaces.py). The wire types and their parsing are in
protocol/mcp_tools.py (the pure core); the client that speaks to a server, through the egress policy,
is tool_registry/mcp_client.py, and the per-response toolset (allowed tools, approvals, call records)
tool_registry/runner.py."""
