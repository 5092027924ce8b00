"""The TFJob CustomResourceDefinition, generated from the operator's own API definitions
(api.py, spec.py): `hack/gen_crd.py` writes it into the chart and the kustomize base."""
