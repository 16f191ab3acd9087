"""MCP (the Model Context Protocol), both ways: an MCP server's tools in a tool registry
(:class:`MCPConnection`), and an agent or a tool registry served as MCP tools
(:func:`mcp_server`, :func:`serve_stdio`, :func:`serve_http`; ``trio-agents mcp``).

Needs the optional ``mcp`` package: ``pip install 'trio-agents[mcp]'``.
"""

from ._client import MCPConnection as MCPConnection
from ._client import MCPStatistics as MCPStatistics
from ._client import MCPTool as MCPTool
from ._client import StdioServer as StdioServer
from ._client import StreamableHTTPServer as StreamableHTTPServer
from ._server import PROMPT_SCHEMA as PROMPT_SCHEMA
from ._server import mcp_server as mcp_server
from ._server import serve_http as serve_http
from ._server import serve_stdio as serve_stdio

__all__ = [
    "PROMPT_SCHEMA",
    "MCPConnection",
    "MCPStatistics",
    "MCPTool",
    "StdioServer",
    "StreamableHTTPServer",
    "mcp_server",
    "serve_http",
    "serve_stdio",
]
