"""The ``--gpu``/``--catalog`` flags and the placement JSON shared by the ``layout`` subcommands."""

from __future__ import annotations

import argparse
from typing import TypedDict

from migfit import profiles


class InstanceJson(TypedDict):
    profile: str
    start: int
    size: int


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpu MODEL`` (required) and ``--catalog FILE``, shared by the layout subcommands."""
    parser.add_argument("--gpu", metavar="MODEL", required=True,
                        help="GPU model: canonical id (A100-80GB) or product label "
                             "(NVIDIA-A100-SXM4-80GB)")
    parser.add_argument("--catalog", metavar="FILE",
                        help="YAML file of models to add or override (same schema as the "
                             "built-in catalog)")


def model_from_args(args: argparse.Namespace) -> profiles.GpuModel:
    """The model named by ``--gpu`` in the catalog (built-in plus ``--catalog``)."""
    return profiles.load(args.catalog).get(args.gpu)
