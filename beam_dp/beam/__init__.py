"""The Beam layer: a file per statistic family over a private core (docs/architecture.md).

Its public names are exported by :mod:`beam_dp`; the underscore modules are internal.
"""
