"""The Lambda entry points, one module per Lambda: read the event and settings, call one lifecycle step, shape its
answer.

Must not touch: what a step decides or does (``nodeflow.lifecycle``, the pure code).
"""
