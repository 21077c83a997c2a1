"""The run's object layout and commit protocols, shared by the runtime (which writes them)
and collect (which reads them): checkpoints, per-rank outputs and their aggregation,
metrics, run info and attempts, GPU monitor files (docs/STORAGE.md)."""
