"""Cluster partitions (Flink's FLIP-67): datasets a successful Batch job promoted, kept in the
partition storage beyond the job, listed, read by later jobs and released on request or expiry.

``manifest`` is what a cluster partition is (pure); ``catalog`` keeps them in a storage URL;
``promotion`` is the producing driver's side.
"""
