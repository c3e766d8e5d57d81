"""The Kubernetes API emulator (``emulator.py``) and the parts of a real API server it adds to
kmock's emulator, one module each."""
