"""Collect a run's committed results from its store into a local directory, and report."""
