"""Which AWS region a command works in: one rule for every CLI command that talks to AWS, and for the Lambdas.

``--region``, else ``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else the region of the profile (``--profile`` /
``AWS_PROFILE``) in the AWS config file: the AWS CLI's order, and the Lambda runtime's (it sets ``AWS_REGION``).
boto3 alone reads only ``AWS_DEFAULT_REGION`` and the config file, so a shell with only ``AWS_REGION`` set would
get "no region" from a bare ``boto3.Session()``: commands make their session with ``aws_session`` instead.

Must not touch: what is done in the region; only which region and session a command uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import boto3

__all__ = ["CATALOG_REGION_HELP", "REGION_HELP", "NoRegion", "aws_session", "region_from_env", "resolve_region"]

_SOURCES = "AWS_REGION, else AWS_DEFAULT_REGION, else the AWS profile's region"
REGION_HELP = f"default: {_SOURCES}"  # --region of the commands that read a stack
# --region of the commands with --catalog: the offline snapshot does not depend on the shell's AWS settings
CATALOG_REGION_HELP = f"AWS region of the catalog (default: us-east-1 offline; with --catalog aws: {_SOURCES})"


class NoRegion(ValueError):
    """No region was given and none is configured."""

    def __init__(self) -> None:
        super().__init__(
            "--region: no region given, and none configured (AWS_REGION, AWS_DEFAULT_REGION or the AWS profile's "
            "region in ~/.aws/config)"
        )


def region_from_env(env: Mapping[str, str]) -> str | None:
    """``AWS_REGION``, else ``AWS_DEFAULT_REGION`` (blank values count as unset); None when neither is set."""
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        value = (env.get(key) or "").strip()
        if value:
            return value
    return None


def resolve_region(flag: str | None, env: Mapping[str, str], profile_region: str | None) -> str | None:
    """The region the module's rule picks (pure): ``flag``, the environment, then ``profile_region``."""
    return (flag or "").strip() or region_from_env(env) or (profile_region or "").strip() or None


def aws_session(region: str | None = None, profile: str | None = None) -> boto3.Session:
    """A boto3 Session (of ``profile``, or the SDK's default one) in the region ``resolve_region`` picks. Raises
    ``NoRegion`` when there is none, and botocore's ``ProfileNotFound`` for an unknown profile."""
    from nodeflow.aws.session import new_session

    session = new_session(profile_name=profile)
    # botocore's region is AWS_DEFAULT_REGION, else the profile's in the config file: last in the rule
    chosen = resolve_region(region, os.environ, session.region_name)
    if chosen is None:
        raise NoRegion
    if chosen != session.region_name:
        session = new_session(region_name=chosen, profile_name=profile)
    return session
