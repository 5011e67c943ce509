"""Kubernetes access: the typed client, snapshots, writes, Events and status patches, with typed errors.

Must not touch: what to write (the lifecycle steps and the pure code decide); AWS.
"""
