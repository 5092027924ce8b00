"""The operator's spec check agrees with the CRD: every TFJob the API server rejects (in
tests/integration/test_crd_validation.py) is rejected by `parse_spec` too, unless only the
API server can know (the pod template's own schema, unknown fields)."""

from __future__ import annotations

import pytest
from support.rejected_tfjobs import REJECTED, Rejected

from tfjob_operator.spec import InvalidSpec, parse_spec

CHECKED = [case for case in REJECTED if case.server_only is None]


@pytest.mark.parametrize("case", CHECKED, ids=[case.id for case in CHECKED])
def test_what_the_api_server_rejects_parse_spec_rejects(case: Rejected) -> None:
    name = case.manifest["metadata"]["name"]
    with pytest.raises(InvalidSpec):
        parse_spec(name, case.manifest.get("spec") or {})


def test_cases_left_to_the_api_server_say_why() -> None:
    left = [case for case in REJECTED if case.server_only is not None]
    assert all(case.server_only for case in left)
    assert len(left) < len(REJECTED) / 2
