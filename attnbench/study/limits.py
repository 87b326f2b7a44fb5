"""The limits of a study's size, apart from the planner so that the command line states
them in its help without loading what plans and runs a study (torch)."""

from __future__ import annotations

#: The most points a study may hold (`plan_study`'s max_points lowers it): planning takes
#: about 60 us a point, and a run rewrites its results.json (~1 KB a point) after every
#: point, for days at 100,000 points.
MAX_POINTS = 100_000
#: The most workers a study can be shared among.
MAX_SHARDS = 100_000
