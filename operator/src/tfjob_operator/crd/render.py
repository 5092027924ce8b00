"""Render the CRD as stable YAML: the same input always gives the same bytes."""

from __future__ import annotations

import json
from typing import Any

import yaml

CEL_KEYS = ("rule", "messageExpression")


class _CelExpression(str):
    """A CEL expression, written as a YAML literal block so its quotes stay readable."""


class _Block(dict[str, Any]):
    """A mapping always written in block style (rules, and anything with a description)."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_cel(dumper: yaml.SafeDumper, data: _CelExpression) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style="|")


def _represent_block(dumper: yaml.SafeDumper, data: _Block) -> yaml.MappingNode:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=False)


_Dumper.add_representer(_CelExpression, _represent_cel)
_Dumper.add_representer(_Block, _represent_block)


def _styled(node: Any, *, sort: bool) -> Any:
    """A copy of `node` marked for rendering; `sort` sorts every mapping's keys.

    Lists keep their order: for `enum`, `x-kubernetes-validations` and printer columns the
    order is meaningful or at least chosen.
    """
    if isinstance(node, list):
        return [_styled(item, sort=sort) for item in node]
    if not isinstance(node, dict):
        return node
    keys = sorted(node) if sort else list(node)
    out = {key: _styled(node[key], sort=sort or key == "openAPIV3Schema") for key in keys}
    is_rule = isinstance(out.get("rule"), str)
    if is_rule:
        for key in CEL_KEYS:
            if key in out:
                out[key] = _CelExpression(out[key])
    if is_rule or isinstance(out.get("description"), str):
        return _Block(out)
    return out


def render_crd(crd: dict[str, Any], header: str) -> str:
    """The CRD as YAML, preceded by `header` as comment lines.

    Keys inside the schema are sorted; the CRD's own keys keep their conventional order.
    Mappings of scalars without a description (most leaves of the pod template) take one
    line each, which keeps the file a third smaller than full block style.
    """
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump(
        _styled(crd, sort=False),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=None,
        width=4096,
        allow_unicode=True,
    )
    return comments + body


def applied_json_size(crd: dict[str, Any]) -> int:
    """Bytes of the compact JSON that `kubectl apply` stores in its last-applied annotation."""
    return len(json.dumps(crd, separators=(",", ":")).encode())
