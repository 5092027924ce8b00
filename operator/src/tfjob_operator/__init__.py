"""Kubernetes operator for distributed TensorFlow training (TFJob, tfjob.dev/v1)."""
