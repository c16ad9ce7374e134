"""The RunnerGroup API: constants, the runner label grammar and the spec/status models.

Everything here is pure data and validation, so both the controller and the tests can use it
without a cluster.
"""
