"""Tools: the provider interface, function tools, the Toolbox, MCP and client-run tools."""
