"""Talking to Kubernetes: the API client and the object conventions every component shares.

Below both the operator and the driver: labels, owner references and the API client are used
by the controller, the driver (its report ConfigMap) and the state stores alike.
"""
