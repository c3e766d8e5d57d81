"""A Kubernetes cluster made of local processes, for the e2e suite (see ``cluster.py``)."""
