"""Pure decisions about a job's life: the FLIP-147 task table, the phase machine, the job graph.

Nothing in this package does I/O; the runtimes and the operator call it and act on the answer.
Import the modules directly (``finishable.lifecycle.table`` ...). The vocabulary the API models
share with the table (modes, task kinds, statuses) lives in ``finishable.api.lifecycle``.
"""
