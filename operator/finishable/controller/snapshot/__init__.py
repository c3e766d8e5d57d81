"""The FinishableSparkSnapshot's controller: snapshot resources recording a job's savepoints, the
ones created by hand to ask for a savepoint, and disposing of a deleted one's savepoint files.

The job's controller records savepoints here and serves requests from here (``controller/job``
may import this package); nothing here imports the job's controller."""
