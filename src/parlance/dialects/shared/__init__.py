"""What every dialect may use and none owns: pydantic at the wire (`wire.py`), MCP
servers a request names (`mcp_servers.py`), function declarations as neutral tool
specs (`tools.py`), the error statuses each API overrides (`errors.py`), and sealed
content clients carry back (`sealed.py`)."""
