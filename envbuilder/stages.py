"""The ordered stage objects of the pipeline: resolve -> precheck -> build -> import -> smoke."""

from __future__ import annotations

import argparse

from envbuilder.pipeline import Stage
from envbuilder.precheck import PrecheckStage
from envbuilder.resolve import ResolveStage


def all_stages(args: argparse.Namespace) -> list[Stage]:
    return [ResolveStage(drift=getattr(args, "drift", False)), PrecheckStage()]
