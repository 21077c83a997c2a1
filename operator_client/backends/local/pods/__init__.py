"""The supervisor's pod launchers: their base (base.py), replicas as processes
(process.py) or as pod sandboxes (sandbox.py), and the factory that picks a job's way
(launch.py). The Linux mechanisms a sandbox is made of are in ../sandbox/."""
