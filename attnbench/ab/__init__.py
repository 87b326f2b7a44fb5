"""`attnbench ab`: two revisions timed in turn in one job, each by its own code (sides),
in worker processes (workers, worker), base and head visits interleaved (runner)."""
