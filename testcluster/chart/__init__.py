"""The project's helm chart as the tests read it: rendered by the real helm, its dashboard, its
RBAC rules."""
