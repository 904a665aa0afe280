"""Replay a GPU workload through migfit's own decision, filter, score and planner code.

See ``engine`` for the event loop, ``metrics`` for what is measured and how, and ``cli``
for ``migfit simulate``.
"""
