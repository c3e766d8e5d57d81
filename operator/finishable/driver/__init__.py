"""The driver: the ``FinishableJob`` API a program calls, and the executors that run it.

Runs in the driver process (the driver pod, or the child process of ``finishable run``). It
steers Spark, keeps checkpoints and savepoints, answers the control channel and hosts the
sources' split enumerators; what Spark runs in its Python workers lives in ``connectors``.
"""
