"""Optional integrations with other tools (each imports its tool; install the extra)."""
