"""The ordered stage objects of the pipeline: resolve -> precheck -> build -> import -> smoke."""

from __future__ import annotations

import argparse

from envbuilder.build import BuildStage
from envbuilder.importcheck import ImportStage
from envbuilder.pipeline import Stage
from envbuilder.precheck import PrecheckStage
from envbuilder.resolve import ResolveStage
from envbuilder.smoke import SmokeStage, parse_checks


def all_stages(args: argparse.Namespace) -> list[Stage]:
    checks = parse_checks(args.checks) if getattr(args, "checks", None) else None
    return [
        ResolveStage(drift=getattr(args, "drift", False)),
        PrecheckStage(),
        BuildStage(runner=getattr(args, "runner", None)),
        ImportStage(),
        SmokeStage(checks=checks),
    ]
