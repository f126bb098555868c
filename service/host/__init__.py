"""What an agent host needs, shared by the Python client and the server's MCP endpoint (never
copied): the host protocol (observations, the reads and writes of a model's tools, the tool
table), the MCP tools, and the rule for numbers given as text. Imports only the protos."""
