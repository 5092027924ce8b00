"""tfjob_trainer: runs one task of a TFJob under the strategy its TF_CONFIG implies.

Entry point: `tfjob-train` (tfjob_trainer.cli). See trainer/README.md.
"""
