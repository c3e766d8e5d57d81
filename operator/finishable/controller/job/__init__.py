"""The FinishableSparkJob's controller: one loop per job observes its pods, asks the phase machine
and acts, builds its children and removes them when the job is deleted."""
