"""Generator of the TFJob CustomResourceDefinition (run it with hack/gen_crd.py)."""
