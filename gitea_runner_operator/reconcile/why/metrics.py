"""Where reconcile/steps/report.py still finds the why series; they are declared in
:mod:`gitea_runner_operator.metrics.why` with every other series."""

from gitea_runner_operator.metrics.why import WhyMetrics

__all__ = ["WhyMetrics"]
