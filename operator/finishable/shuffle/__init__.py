"""Shuffle server storing result partitions, its client and the partition tracker."""
