"""What an agent host needs, shared by the Python client and the server's MCP endpoint (never
copied): the host protocol (observations, the reads and writes of a model's tools, the tool
table), the MCP tools, the rule for numbers given as text, the check of text UTF-8 cannot carry
(used by the client and the integrations too) and the check of a server address (a member's). Imports only the protos."""
