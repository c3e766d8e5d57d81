"""``finishable run``: the operator's part played locally: runner, job files, shuffle servers."""
