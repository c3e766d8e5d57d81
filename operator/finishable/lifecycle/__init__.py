"""Pure decisions about a job's life: the FLIP-147 task table, the phase machine, the job graph.

Nothing in this package does I/O; the runtimes and the operator call it and act on the answer.
Import the modules directly (``finishable.lifecycle.table`` ...): this ``__init__`` stays empty so
that ``finishable.api`` may import the lifecycle enums without an import cycle.
"""
