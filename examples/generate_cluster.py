"""Write a large synthetic cluster (a `kubectl get nodes,pods -A -o yaml|json` List) for benchmarks.

    python examples/generate_cluster.py --nodes 5000 --pods 150000 --format json -o big.json

The objects are full-size (GFD labels, managedFields, status, images; pods with several
containers, env, volumes, ownerReferences), made by migfit.synthetic, streamed to the output
so a 150,000-pod cluster never sits in memory at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO

import yaml

from migfit import synthetic

_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write(out: IO[str], *, nodes: int, pods: int, seed: int, fmt: str, gpu_share: float) -> int:
    """Stream the List to ``out``; returns the number of objects written."""
    objects = synthetic.iter_objects(nodes, pods, seed, gpu_share=gpu_share)
    count = 0
    if fmt == "json":
        out.write('{"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, '
                  '"items": [\n')
        for obj in objects:
            if count:
                out.write(",\n")
            out.write(json.dumps(obj, separators=(",", ":")))
            count += 1
        out.write("\n]}\n")
        return count
    out.write("apiVersion: v1\nitems:\n")
    for obj in objects:
        out.write(yaml.dump([obj], Dumper=_DUMPER, default_flow_style=False, sort_keys=True))
        count += 1
    out.write("kind: List\nmetadata:\n  resourceVersion: ''\n")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gpu-share", type=float, default=0.9,
                        help="share of pods that request a MIG instance (default 0.9)")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml")
    parser.add_argument("-o", "--output", metavar="FILE", help="default: standard output")
    args = parser.parse_args(argv)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            n = write(out, nodes=args.nodes, pods=args.pods, seed=args.seed, fmt=args.format,
                      gpu_share=args.gpu_share)
        print(f"wrote {n} objects to {args.output}", file=sys.stderr)
    else:
        write(sys.stdout, nodes=args.nodes, pods=args.pods, seed=args.seed, fmt=args.format,
              gpu_share=args.gpu_share)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
