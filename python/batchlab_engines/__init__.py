"""The Python engines batchlab ships; docs/engines.md describes the protocol they implement.

batchlab compiles these files into its binary: a scenario names them as
`batchlab_engines.<module>:<Class>` without any `engine.python.path`. Importing this package
imports no engine library; each engine imports its own in `start()`.
"""
