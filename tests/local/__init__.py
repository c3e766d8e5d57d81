"""Tests of ``finishable run``: the local runner and the job files it keeps."""
