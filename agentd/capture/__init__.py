"""agentd capture: recording a node into one file, and replaying such a file as a host root."""
