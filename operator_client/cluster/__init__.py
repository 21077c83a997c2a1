"""Where rendered PyTorchJobs run: the local backend (processes on this machine)."""
