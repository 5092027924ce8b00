"""Helpers shared by the integration and e2e suites: the operator process and TFJob utilities."""
