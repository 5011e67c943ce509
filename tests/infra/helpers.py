"""Reading synthesized CloudFormation templates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def statements(policy_resources: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(policy logical id, statement) for every statement of the given AWS::IAM::Policy resources."""
    out = []
    for lid, res in policy_resources.items():
        for st in res["Properties"]["PolicyDocument"]["Statement"]:
            out.append((lid, st))
    return out


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def ref_of(value: Any) -> str | None:
    """The logical id a Ref / Fn::GetAtt points at (None otherwise)."""
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None


def role_statements(resources: Mapping[str, Mapping[str, Any]], role_id: str) -> list[dict[str, Any]]:
    """Every statement of the AWS::IAM::Policy resources attached to role ``role_id``."""
    out: list[dict[str, Any]] = []
    for res in resources.values():
        if res["Type"] != "AWS::IAM::Policy":
            continue
        if any(ref_of(r) == role_id for r in res["Properties"].get("Roles", [])):
            out.extend(res["Properties"]["PolicyDocument"]["Statement"])
    return out


def actions_of(statement: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in as_list(statement.get("Action", []))]


def function_named(resources: Mapping[str, Mapping[str, Any]], name: str) -> tuple[str, dict[str, Any]]:
    """(logical id, resource) of the AWS::Lambda::Function called ``name``."""
    for lid, res in resources.items():
        if res["Type"] == "AWS::Lambda::Function" and res["Properties"].get("FunctionName") == name:
            return lid, dict(res)
    raise AssertionError(f"no function {name}")
