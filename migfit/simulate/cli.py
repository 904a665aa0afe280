"""``migfit simulate``: replay a GPU trace through migfit and the baselines, and report.

By default it replays the Alibaba GPU trace's default pod list (cluster-trace-gpu-v2023,
FGD's ATC '23 workload; public repository alibaba/clusterdata, folder
cluster-trace-gpu-v2023/csv) on its 1,213 GPU nodes, every GPU treated as an A100-80GB
(``--model-map``), with initial layouts sized from the first half of the pod list and the
second half replayed (``--layout history``). ``--example`` runs the simulator's small cluster
(migfit/simulate/example-cluster.yaml, not the one ``migfit serve`` reads) with synthetic pods,
without the trace. A run says first, on stderr, what it replays and about how long it takes.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import shlex
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from migfit import errors, flagtypes, profiles
from migfit.commands import options
from migfit.extender import relayout_machine
from migfit.simulate import adapters, engine, initial, metrics, policies, report, spec, workload
from migfit.simulate.waitbound import SCIPY_HINT
from migfit.webhook import choice

TRACE_ENV = "MIGFIT_TRACE_DIR"
NODE_CSV = "openb_node_list_gpu_node.csv"
POD_CSV = "openb_pod_list_default.csv"
DEFAULT_PICTURES = ("default", "migfit+advisor")
HISTORY = "history"
DEFAULT_LAYOUT = HISTORY
EXAMPLE_CLUSTER = Path(__file__).resolve().parent / "example-cluster.yaml"
EXAMPLE_NAME = "migfit/simulate/example-cluster.yaml"  # as help and notices name it
EXAMPLE_SHAPE = "26 nodes: 24 with 4 or 8 A100-80GB GPUs, 2 without GPUs"  # tests hold it true
EXAMPLE_PODS = 600
MIN_SAMPLES, MAX_SAMPLES = 2, 10_000  # --samples: the idle-while-pending figure needs two
MAX_ARRIVAL_SCALE = 1e6  # --arrival-scale: a day of the trace in 2,700 years
# Events: the replayed arrivals (after --arrival-scale) and their run times end by this
# simulated time, about 3,170 years: the pods' timestamps hold up to the year 9999, from
# engine.EPOCH (2026) some 7,970 years, so waits have room to spare.
CLOCK_LIMIT_S = 1e11
MAX_SYNTHETIC = 1_000_000  # --synthetic: some hours of replay per policy and seed
MAX_TARGET = 10.0  # --target: ten times the cluster's GPUs requested (the trace's fill: minutes)


def default_trace_dir() -> Path:
    """$MIGFIT_TRACE_DIR, else ../shared/traces/alibaba-gpu-v2023 next to the repository."""
    env = os.environ.get(TRACE_ENV)
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    return root.parent / "shared" / "traces" / "alibaba-gpu-v2023"


DEFAULT_POLICIES = ",".join(p.name for p in engine.ALL_POLICIES)
# Flags of one mode or one input, None unless given (so that giving them where they do
# nothing is refused), and their values when not given.
FILL_DEFAULTS: dict[str, Any] = {"target": 1.3, "order": "sample", "fill_interval": 1.0}
EVENTS_DEFAULTS: dict[str, Any] = {"arrival_scale": 1.0, "snapshot_at": None}
OTHER_DEFAULTS: dict[str, Any] = {"history_share": 0.5, "model": spec.DEFAULT_MODEL}
# Flags of the +advisor policies alone (the advisor's and the MIG Manager's), in the order
# --help lists them: given with no +advisor policy they would do nothing, so they are
# refused (``check_advisor_flags``). --no-ahead is ``no_ahead`` here and ``ahead_from`` None
# after ``_given``.
ADVISOR_DEFAULTS: dict[str, Any] = {
    "relayout_seconds": 180.0, "config_sync_seconds": 0.0, "advise_interval": 30.0,
    "max_relayouts": options.relayout_limit("16"), "advisor": "advisor",
    "advisor_grace": policies.SERVER_ADVISOR.grace_s,
    "advisor_free_grace": policies.SERVER_ADVISOR.free_grace_s, "busy_nodes": False,
    "ahead_from": policies.SERVER_ADVISOR.ahead_from,
    "balance": policies.SERVER_ADVISOR.balance_gain is not None, "gpu_usage": False}
NO_AHEAD = "no_ahead"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("inputs")
    src.add_argument("--trace-dir", type=Path, default=None,
                     help=f"folder of the Alibaba GPU trace CSVs (default: ${TRACE_ENV}, else "
                          f"../shared/traces/alibaba-gpu-v2023 beside the repository)")
    src.add_argument("--cluster", type=Path, default=None, metavar="SPEC.yaml",
                     help="a cluster spec (node groups: name, count, model, gpus, cpu, memory, "
                          "layout or layouts) instead of the trace's node list")
    src.add_argument("--nodes", type=Path, default=None, metavar="CSV",
                     help=f"the trace's node list (default: TRACE_DIR/{NODE_CSV})")
    src.add_argument("--example", action="store_true",
                     help=f"run without the trace, in a few seconds: the simulator's own "
                          f"small cluster, {EXAMPLE_NAME} ({EXAMPLE_SHAPE}; not "
                          f"migfit/data/example-cluster.yaml, the cluster of migfit serve), "
                          f"and {EXAMPLE_PODS} synthetic pods (--synthetic to change)")
    src.add_argument("--model", default=None,
                     help=f"MIG model the trace's GPU models are treated as unless "
                          f"--model-map names them (default {spec.DEFAULT_MODEL}; for the "
                          f"trace's node list, not --cluster or --example)")
    src.add_argument("--model-map", default="", metavar="TRACE=MIG,...",
                     help="the trace's GPU models (node list column model: P100, T4, V100M16, "
                          "V100M32, G2, G3, A10) as MIG models, e.g. "
                          "V100M32=A100-80GB,T4=A30-24GB (*=MODEL for the rest); unnamed "
                          "models are --model. Nodes keep their trace model for the pods' "
                          "gpu_spec. Each model once, spelt as in the node list (names are "
                          "case-sensitive); one the node list lacks is refused")
    src.add_argument("--layout", default=None,
                     help="initial layout of the GPUs: history (the default for the trace's "
                          "node list: demand-matched on the first --history-share of the pod "
                          "list, which is then not replayed), named configs in proportions "
                          "of the GPUs, whole nodes each (all-balanced=50%%,all-1g.10gb=25%%,"
                          "all-7g.80gb=25%%), demand-matched (an oracle: per-GPU layouts "
                          "derived from the replayed workload's own profile mix, see "
                          "migfit/simulate/initial.py), a mig-parted config name "
                          "(all-balanced, all-1g.10gb, "
                          "all-3g, ...), a comma-separated profile list such as "
                          "3g.40gb,2g.20gb,1g.10gb,1g.10gb, or per-GPU layouts separated by "
                          "';' that the cluster's GPUs take in turn, e.g. "
                          "'7g.80gb;7g.80gb;4g.40gb,3g.40gb'. With --cluster it replaces the "
                          "spec's layouts")
    src.add_argument("--history-share", type=flagtypes.share, default=None, metavar="F",
                     help="--layout history: the first F of the pod list (creation order) "
                          "sizes the layouts; the rest is replayed (between 0 and 1; "
                          "default 0.5)")
    src.add_argument("--pods", type=Path, default=None, metavar="CSV",
                     help=f"the trace's pod list (default: TRACE_DIR/{POD_CSV}); a relative "
                          f"path not found here is looked up in TRACE_DIR")
    src.add_argument("--synthetic", type=int, default=None, metavar="N",
                     help=f"N synthetic pods (workload.SYNTHETIC_MIX) instead of a pod list "
                          f"(1 to {MAX_SYNTHETIC:,})")
    src.add_argument("--synthetic-seed", type=int, default=None, metavar="S",
                     help="the seed the synthetic pods (--synthetic, --example) are drawn with, "
                          "once for every run (default: --seed); each run's seed then draws "
                          "the arrivals from them (fill) or breaks ties (events), so the run "
                          "recorded as seed N of a command is replayed alone by --seed N "
                          "--synthetic-seed S")
    src.add_argument("--mapping", choices=("compute", "memory"), default="compute",
                     help="how a trace GPU share becomes a MIG request (trace README): "
                          "compute = ceil(gpu_milli×7/1000) compute slices, memory = "
                          "ceil(gpu_milli×8/1000) memory slices; whole GPUs are 7g")
    src.add_argument("--limit-pods", type=int, default=None, metavar="N",
                     help="use only the first N pods of the pod list")
    src.add_argument("--node-share", type=flagtypes.share, default=1.0, metavar="F",
                     help="keep this share of the nodes, the same share of every node shape "
                          "(model, GPUs, cpu, memory) and at least one node of each (the "
                          "trace's node list has 15 shapes), in list order: a smaller "
                          "cluster with "
                          "the same mix, which the trace's own arrivals load in events mode "
                          "(with --arrival-scale)")
    src.add_argument("--catalog", type=Path, default=None, metavar="FILE",
                     help="a catalog file adding or overriding GPU models")
    run = parser.add_argument_group("simulation")
    run.add_argument("--mode", choices=("fill", "events"), default="fill",
                     help="fill: arrivals only, until --target of GPU capacity is requested "
                          "(FGD's setup); events: arrivals and departures in trace time")
    run.add_argument("--target", type=flagtypes.share, default=None,
                     help=f"fill: stop when the trace GPUs requested reach this share of the "
                          f"cluster's GPUs (above 0, at most {MAX_TARGET:g}; default "
                          f"{FILL_DEFAULTS['target']:g})")
    run.add_argument("--order", choices=("sample", "trace"), default=None,
                     help="fill: draw pods at random with replacement (by seed), or take them "
                          "in trace order first (default sample)")
    run.add_argument("--fill-interval", type=flagtypes.number, default=None, metavar="S",
                     help="fill: seconds between two arrivals (sets the pace against re-layouts; "
                          "0 or more; default 1)")
    run.add_argument("--relayout-seconds", type=flagtypes.number, default=None, metavar="S",
                     help=f"+advisor: how long the MIG Manager takes to re-partition a node "
                          f"(it serves nothing new meanwhile; 0 or more; default "
                          f"{ADVISOR_DEFAULTS['relayout_seconds']:g})")
    run.add_argument("--config-sync-seconds", type=flagtypes.number, default=None, metavar="S",
                     help="+advisor: a custom config's first re-layout starts this long after "
                          "it was "
                          "first advised, as the extender's --apply-custom-configs writes it "
                          "then and starts it once the extender's --config-sync (120) has "
                          "passed; 0 (default): custom configs are in the ConfigMap already")
    run.add_argument("--advise-interval", type=flagtypes.number, default=None, metavar="S",
                     help=f"+advisor: the advisor runs at most this often while pods are "
                          f"pending (0 or more; default "
                          f"{ADVISOR_DEFAULTS['advise_interval']:g})")
    run.add_argument("--max-relayouts", type=options.relayout_limit, default=None,
                     metavar="N|P%",
                     help="+advisor: re-layouts in flight at once: a number, or a share of "
                          "the GPU nodes such as 10%% (at least one), as the extender's apply "
                          "mode takes it (default 16)")
    run.add_argument("--advisor", choices=("advisor", "planner"), default=None,
                     help="+advisor: advisor = migfit.advisor.advise (the default; what the "
                          "server recommends: pods "
                          "that no node with free instances can take, safe nodes); planner = "
                          "migfit.planner.plan_cluster on every pending pod's instances over "
                          "idle nodes (for comparison)")
    run.add_argument("--advisor-grace", type=flagtypes.number, default=None, metavar="S",
                     help="+advisor: seconds a pod must have been unschedulable before the "
                          "advisor counts it (0 or more; default: the server's --grace "
                          "default)")
    run.add_argument("--advisor-free-grace", type=flagtypes.number, default=None, metavar="S",
                     help="+advisor: seconds after which the advisor counts an unschedulable "
                          "pod even "
                          "though free instances of its profile exist somewhere (they are of "
                          "no use to it: cpu, memory, taints); 0 or more; default: the "
                          "server's")
    run.add_argument("--percentage-of-nodes-to-score", type=int, default=0, metavar="P",
                     help="kube-scheduler's percentageOfNodesToScore: 0 = adaptive (50 - "
                          "nodes/125 %%, at least 5 %%, at least 100 nodes; the shipped "
                          "config), 100 = every feasible node (0 to 100)")
    run.add_argument("--allocation", choices=("distributed", "packed"),
                     default="distributed",
                     help="the device plugin's choice of instance inside a node: from the "
                          "GPU with the fewest (distributed) or most (packed) instances in use")
    run.add_argument("--busy-nodes", action=argparse.BooleanOptionalAction, default=None,
                     help="+advisor: also re-lay out the GPUs of busy nodes that hold no "
                          "instance in use, their pods' GPUs kept exactly (the apply mode's "
                          "--apply-busy-nodes; docs/relayout.md)")
    run.add_argument("--ahead-from", type=flagtypes.share, default=None, metavar="SHARE",
                     help=f"+advisor: re-lay out idle nodes ahead of demand, toward the "
                          f"profiles the demand mix will be short of, once a model's "
                          f"instances are this share allocated (default "
                          f"{ADVISOR_DEFAULTS['ahead_from']:g}, the server's; 0 from the start; "
                          f"--no-ahead: only for waiting pods)")
    run.add_argument("--no-ahead", dest=NO_AHEAD, action="store_true",
                     help="+advisor: re-lay out only for waiting pods (and no --balance)")
    run.add_argument("--balance", action=argparse.BooleanOptionalAction, default=None,
                     help="+advisor, with re-layouts ahead of demand: idle nodes trade GPU "
                          "layouts so that each node's cpu and memory can feed its instances "
                          "(the server's default; docs/relayout.md)")
    run.add_argument("--gpu-usage", action=argparse.BooleanOptionalAction, default=None,
                     help="+advisor: the advisor knows which GPU holds each instance in use "
                          "(the nodes' DCGM exporters: the extender's --gpu-usage-from dcgm), not "
                          "only the node's counts")
    run.add_argument("--arrival-scale", type=flagtypes.number, default=None, metavar="F",
                     help="events: arrival times (from the first) multiplied by F; below 1 the "
                          "same pods with the same run times arrive faster, which loads the "
                          f"cluster (the trace in its own time never does); above 0, at most "
                          f"{MAX_ARRIVAL_SCALE:,.0f}, and at most what keeps the replay within "
                          f"the simulated clock (default 1)")
    run.add_argument("--score-all-pods", action=argparse.BooleanOptionalAction, default=False,
                     help="migfit: the extender scores pods without GPU requests too (the "
                          "extender's --score-all-pods, registered without managedResources)")
    run.add_argument("--webhook-choice", choices=choice.CONTENTIONS, default=None,
                     help="the webhook's choice when the smallest fitting profile has no free "
                          "instance (the webhook's --choice; default: the webhook's default, "
                          f"{choice.Policy().contention})")
    run.add_argument("--gpu-weight", type=int, default=3, metavar="W",
                     help="binpack-gpu: the MIG resource's weight in MostAllocated (cpu and "
                          "memory weigh 1; 1 to 100, as kube-scheduler takes it)")
    run.add_argument("--extender-weight", type=int, default=5,
                     help="the extender's weight in the scheduler config (score × weight × 10; "
                          "1 or more: kube-scheduler refuses a weight of 0 or less)")
    run.add_argument("--policies", default=DEFAULT_POLICIES,
                     help="comma-separated policies: default, binpack, binpack-gpu, random, "
                          "fgd, migfit, each optionally +advisor; bound (the LP relaxation no "
                          "policy can beat, any re-layout) and bound-static (initial layouts "
                          "fixed); upper-bound (instances on demand, best fit: not a bound)")
    run.add_argument("--seeds", type=int, default=1, metavar="N",
                     help="run every policy with seeds BASE..BASE+N-1")
    run.add_argument("--seed", type=int, default=0, metavar="BASE", help="the first seed")
    run.add_argument("--jobs", type=int, default=1,
                     help="runs in parallel (processes; 1 or more)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=Path, default=None, metavar="FILE",
                     help="write every figure, time series and GPU picture as JSON")
    out.add_argument("--report", type=Path, default=None, metavar="FILE.html",
                     help="write a self-contained HTML report with SVG charts")
    out.add_argument("--picture", action="append", default=None, metavar="POLICY",
                     help=f"policies whose GPU slices the report draws (repeatable; each one of "
                          f"--policies; default: "
                          f"{', '.join(DEFAULT_PICTURES)})")
    out.add_argument("--snapshot-at", type=flagtypes.number, default=None, metavar="T",
                     help="events: trace time of the GPU picture, after --arrival-scale, "
                          "from 0 to the last arrival (the default)")
    out.add_argument("--samples", type=int, default=200,
                     help=f"points per time series ({MIN_SAMPLES} to {MAX_SAMPLES:,}: the "
                          f"idle-while-pending figure integrates them, and one sample "
                          f"holds nothing between the first and the last arrival)")
    out.add_argument("--markdown", action="store_true",
                     help="also print the results as a markdown table")
    out.add_argument("--waits-by-class", action="store_true",
                     help="also print the GPU waits per pod class (its instances): pods, "
                          "p50, p95, longest, and which classes make the GPU wait p95")


def _policies(text: str) -> list[engine.Policy]:
    out: list[engine.Policy] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            policy = engine.Policy.parse(item)
        except ValueError as exc:
            raise errors.UsageError(str(exc)) from None
        if policy in out:
            raise errors.UsageError(f"--policies names {policy.name} twice (its runs would "
                                    f"be merged into one row); name each policy once")
        out.append(policy)
    if not out:
        raise errors.UsageError("--policies names no policy")
    return out


def _inputs(args: argparse.Namespace, catalog: profiles.Catalog
            ) -> tuple[list[spec.NodeSpec], list[workload.PodSpec], dict[str, Any]]:
    trace_dir: Path = args.trace_dir or default_trace_dir()
    info: dict[str, Any] = {}
    cluster_file: Path | None = args.cluster
    if args.example and cluster_file is None:
        cluster_file = EXAMPLE_CLUSTER
    if cluster_file is not None:
        nodes = spec.load_spec(cluster_file, catalog)
        info["cluster"] = str(cluster_file)
    else:
        path = args.nodes or trace_dir / NODE_CSV
        if not path.exists():
            raise errors.UsageError(
                f"no node list at {path}; give --trace-dir, --nodes or --cluster (or set "
                f"${TRACE_ENV}), or try --example. The trace is Alibaba's "
                f"cluster-trace-gpu-v2023 (public repository alibaba/clusterdata, folder "
                f"cluster-trace-gpu-v2023/csv)")
        try:
            model = catalog.get(args.model)
        except errors.UnknownModelError as exc:
            raise errors.UsageError(f"--model {args.model}: {exc}") from None
        model_map = spec.parse_model_map(args.model_map, catalog)
        nodes = spec.load_node_csv(path, model=model, layout="all-balanced",
                                   model_map=model_map)
        mapped = ", ".join(f"{k}={v.id}" for k, v in sorted(model_map.items()))
        info["cluster"] = f"{path} as {model.id}" + (f" ({mapped})" if mapped else "")
    if args.node_share != 1.0:
        if not 0 < args.node_share <= 1:
            raise errors.UsageError(f"--node-share {flagtypes.shown(args.node_share)}: use a "
                                    f"share in (0, 1], e.g. 0.125 for one node in eight")
        total, shapes = len(nodes), len({_shape(n) for n in nodes})
        nodes = share_of_nodes(nodes, args.node_share)
        info["cluster"] += f", {args.node_share:g} of its nodes per shape"
        info["node_share_kept"] = (f"{len(nodes):,} of {total:,} nodes, at least one of each "
                                   f"of the {shapes} node shape{'s' if shapes != 1 else ''}")
    gpu_models = Counter[str]()
    for n in nodes:
        gpu_models[n.model.id] += n.gpus
    if not gpu_models or not any(n.gpus for n in nodes):
        raise errors.UsageError("the simulated cluster has no GPU")
    # The trace mapping needs one reference model: the one with the most GPUs.
    ref = catalog.get(max(sorted(gpu_models), key=lambda m: gpu_models[m]))
    synthetic = args.synthetic if args.synthetic is not None else (
        EXAMPLE_PODS if args.example else None)
    if args.limit_pods is not None and args.limit_pods < 1:
        raise errors.UsageError(f"--limit-pods {args.limit_pods}: use 1 or more pods")
    if synthetic is not None:
        if not 1 <= synthetic <= MAX_SYNTHETIC:
            raise errors.UsageError(f"--synthetic {synthetic}: use 1 to {MAX_SYNTHETIC:,} pods")
        # Made in turn, so the first N are the same whatever the count: --limit-pods N
        # makes only those.
        made = min(synthetic, args.limit_pods or synthetic)
        drawn = args.seed if args.synthetic_seed is None else args.synthetic_seed
        pods = workload.synthetic(made, model=ref, mapping=args.mapping, seed=drawn)
        info["workload"] = f"{synthetic} synthetic pods"
        info["synthetic_seed"] = drawn
    else:
        path = args.pods or trace_dir / POD_CSV
        if (args.pods is not None and not path.exists() and not path.is_absolute()
                and (trace_dir / path).exists()):
            path = trace_dir / path  # a list of the trace named as the trace names it
        if not path.exists():
            raise errors.UsageError(f"no pod list at {path}; give --trace-dir, --pods or "
                                    f"--synthetic (or set ${TRACE_ENV}), or try --example")
        pods = workload.load_trace(path, model=ref, mapping=args.mapping)
        if not pods:
            raise errors.UsageError(f"{path}: the pod list has no pods (a header line "
                                    f"only); give a list with pods, or --synthetic N")
        info["workload"] = str(path)
    if args.limit_pods is not None:
        pods = pods[: args.limit_pods]
    if args.mode == "events" and len(pods) > 1 and len({p.arrival for p in pods}) == 1:
        # Such a list (the trace's multigpu lists, which have no creation_time) would
        # arrive all at once and, without deletion_time, never leave: a fill whose
        # waits measure only how long a policy keeps the clock running (re-layouts do,
        # the default scheduler does not), not a replay.
        leave = ("and never leave" if all(math.isinf(p.duration) for p in pods)
                 else "at once")
        raise errors.UsageError(
            f"--mode events: all {len(pods)} pods of {info['workload']} arrive at "
            f"{pods[0].arrival:g} s {leave}: the list gives no arrival times "
            f"(creation_time) to replay. Use --mode fill for it, or a pod list with "
            f"creation_time and deletion_time (openb_pod_list_default.csv, "
            f"openb_pod_list_gpushare100.csv)")
    layout: str | None = args.layout
    if layout is None and cluster_file is None:
        layout = DEFAULT_LAYOUT
    if layout is not None:
        sized = len(pods)
        nodes, pods = _layouts(layout, nodes, pods, history_share=args.history_share)
        if not pods:
            raise errors.UsageError(
                f"--layout {layout}: all {sized} pod{'s' if sized != 1 else ''} of "
                f"{info['workload']} size the initial layouts and none is left to replay; "
                f"give more pods (--limit-pods) or choose another --layout")
        info["cluster"] += f", initial layout {layout}"
        if layout == HISTORY:
            info["cluster"] += (f" (sized on the first {args.history_share:.0%} of the pod "
                                f"list; the other {len(pods)} pods replayed)")
    info.update(layout=layout or "from the spec", nodes=len(nodes),
                gpus=sum(n.gpus for n in nodes), model=ref.id,
                # each model's GPUs when there are several; one model's are the GPUs count
                models=", ".join(f"{m} ({g} GPU{'s' if g != 1 else ''})" if len(gpu_models) > 1
                                 else m for m, g in sorted(gpu_models.items())),
                pods_in_workload=len(pods), mapping=args.mapping)
    return nodes, pods, info


def _worker_start() -> None:
    """A pool worker leaves stopping to its parent, which terminates the pool: Ctrl-C to the
    process group would otherwise print each worker's traceback, and the SIGTERM handler it
    inherits is the parent's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _terminated(signum: int, _frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def _run_in_pool(jobs: list[Any], workers: int) -> list[engine.RunResult]:
    """The runs on ``workers`` processes, in order. A SIGTERM to this process alone (a
    ``kill``, a job scheduler) exits 143 and terminates the workers too: they used to run
    on for minutes, orphaned."""
    ctx = multiprocessing.get_context("fork")
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        with ctx.Pool(workers, initializer=_worker_start) as pool:  # exit: terminate()
            return pool.map(_run_one, jobs, chunksize=1)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _count(n: int, noun: str) -> str:
    """``n`` ``noun``s, singular for one: "1 run", "12 GPUs"."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _share(value: float) -> str:
    """A share as a percentage, to the first digit that shows it (``--target 0.0001``: 0.01 %,
    not 0 %)."""
    if value == 0 or value >= 0.01:
        return f"{value:.0%}"
    return f"{value * 100:.2g}%"


def _check_clock(args: argparse.Namespace, pods: Sequence[workload.PodSpec]) -> None:
    """Events: the replay within the simulated clock (``CLOCK_LIMIT_S``) at --arrival-scale,
    and --snapshot-at within the replayed arrivals."""
    if args.mode != "events" or not pods:
        return
    start = min(p.arrival for p in pods)
    span = max(p.arrival for p in pods) - start
    runs = max((p.duration for p in pods if math.isfinite(p.duration)), default=0.0)
    if start + span * args.arrival_scale + runs > CLOCK_LIMIT_S:
        # The pod list's times are at most workload.TIME_LIMIT_S, so the span is above 0.
        most = math.floor((CLOCK_LIMIT_S - start - runs) / span)
        raise errors.UsageError(
            f"--arrival-scale {args.arrival_scale:g}: the {len(pods):,} pods replayed arrive "
            f"over {span / 86_400:,.1f} days of trace time, which it stretches past the "
            f"simulated clock's end ({CLOCK_LIMIT_S:.0e} s, about "
            f"{CLOCK_LIMIT_S / 31_557_600:,.0f} years); use at most {most:,} for this pod "
            f"list")
    last = start + span * args.arrival_scale
    at = args.snapshot_at
    if at is not None and not (math.isfinite(at) and 0 <= at <= last):
        raise errors.UsageError(
            f"--snapshot-at {at:g}: use a trace time from 0 to the last arrival, {last:,.0f} s "
            f"(times after --arrival-scale)")


# The start notice's estimate, by the pods a run replays × nodes: the trace's fill on its
# 1,213 nodes (some 13,000 arrivals: 16 M) takes minutes per run on 2 cores, its events
# (4,076: 4.9 M) too, the example (about 150 × 26) a second.
LARGE_REPLAY = 1_000_000
SMALL_REPLAY = 100_000


def arrivals_per_run(args: argparse.Namespace, pods: Sequence[workload.PodSpec],
                     gpus: int) -> int:
    """About how many pods a run replays: events, the pod list's; fill, as many as are
    drawn (on average) until --target of the GPUs is requested."""
    if args.mode == "events" or not pods:
        return len(pods)
    mean = sum(p.trace_gpus for p in pods) / len(pods)
    return math.ceil(args.target * gpus / mean) if mean > 0 else len(pods)


def start_notice(args: argparse.Namespace, info: dict[str, Any], *, runs: int,
                 arrivals: int | None = None) -> str:
    """One line, before the first run, on what is replayed and about how long it takes: with
    no arguments the full trace's replay took minutes with nothing said."""
    workload = str(info["workload"])
    replayed: int = info["pods_in_workload"]  # after --layout history's split
    if workload.endswith(" synthetic pods"):
        made = int(workload.removesuffix(" synthetic pods"))
        pods = (f"{replayed:,} synthetic pods" if replayed == made
                else f"{replayed:,} of {made:,} synthetic pods")
    else:
        pods = f"{replayed:,} pods of {Path(workload).name}"
    example = args.example and args.cluster is None
    trace = args.cluster is None and not args.example
    where = (f"{EXAMPLE_NAME} ({info['nodes']:,} nodes, {info['gpus']:,} GPUs)" if example
             else f"{'the trace' if trace else 'the spec'}'s {info['nodes']:,} nodes "
                  f"({info['gpus']:,} GPUs)")
    what = f"replaying {pods} on {where}: {runs} run{'s' if runs != 1 else ''}"
    size = (replayed if arrivals is None else arrivals) * int(info["nodes"])
    if size >= LARGE_REPLAY:
        return (f"{what}, several minutes on 2 cores (--jobs N runs N at once; --example "
                f"for a quick run)")
    if size <= SMALL_REPLAY:
        return f"{what}, a few seconds"
    return what


def unplaceable(nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec]
                ) -> list[str]:
    """Warnings, one line each, on replayed pods that no node of the cluster can ever take:
    more cpu or memory than any node (any GPU node, for a GPU pod) has, more GPUs than any
    node has, or a ``gpu_spec`` naming only GPU models no node has. They
    are replayed as they are (in a real cluster they would stay Pending too), and said once
    with their count, since they wait for ever and weigh on every policy's waits."""
    gpu_nodes = [n for n in nodes if n.gpus]
    most = max((n.gpus for n in gpu_nodes), default=0)
    present = {n.trace_model for n in gpu_nodes}
    out: list[str] = []
    hosts = [(n.cpu_milli, n.memory_mib) for n in nodes]
    gpu_hosts = [(n.cpu_milli, n.memory_mib) for n in gpu_nodes]
    too_big = [p for p in pods
               if not any(p.cpu_milli <= c and p.memory_mib <= m
                          for c, m in (gpu_hosts if p.gpu else hosts))]
    if too_big:
        out.append(f"migfit simulate: warning: {len(too_big):,} of the {len(pods):,} pods "
                   f"replayed ask for more cpu or memory (up to "
                   f"{max(p.cpu_milli for p in too_big):,} cpu_milli, "
                   f"{max(p.memory_mib for p in too_big):,} memory_mib) than any node that "
                   f"could take them has: no policy can place them")
    too_many = [p for p in pods if p.gpu and p.num_gpu > most]
    if too_many:
        asked = max(p.num_gpu for p in too_many)
        out.append(f"migfit simulate: warning: {len(too_many):,} of the {len(pods):,} pods "
                   f"replayed ask for more GPUs (up to {asked}) than any node has ({most}): "
                   f"no policy can place them")
    elsewhere = [p for p in pods if p.gpu and p.gpu_spec and not p.gpu_spec & present]
    if elsewhere:
        named = sorted(set().union(*(p.gpu_spec for p in elsewhere)) - present)
        out.append(f"migfit simulate: warning: {len(elsewhere):,} of the {len(pods):,} pods "
                   f"replayed ask (gpu_spec) only for GPU models no node has "
                   f"({', '.join(named)}; the nodes have {', '.join(sorted(present))}): no "
                   f"policy can place them")
    return out


def _relayout_limit(limit: tuple[int, float | None], nodes: Sequence[spec.NodeSpec]) -> int:
    """``--max-relayouts`` as a count: N, or the share of the GPU nodes (at least one), as
    the apply mode counts it (``relayout_machine.Settings.limit``)."""
    count, share = limit
    if share is None:
        return count
    return relayout_machine.share_of(share, sum(1 for n in nodes if n.gpus))


def _shape(n: spec.NodeSpec) -> tuple[str, int, int, int]:
    """A node's shape, as ``--node-share`` keeps its share of each: model, GPUs, cpu,
    memory."""
    return n.model.id, n.gpus, n.cpu_milli, n.memory_mib


def share_of_nodes(nodes: Sequence[spec.NodeSpec], share: float) -> list[spec.NodeSpec]:
    """``share`` of the nodes of every shape (model, GPUs, cpu, memory), at least one of each,
    the first ones in list order (deterministic: no seed), in their original order."""
    groups: dict[tuple[str, int, int, int], list[int]] = {}
    for i, n in enumerate(nodes):
        groups.setdefault(_shape(n), []).append(i)
    keep = sorted(i for group in groups.values()
                  for i in group[: max(1, round(share * len(group)))])
    return [nodes[i] for i in keep]


def _demand_matched(nodes: list[spec.NodeSpec], sizing: Sequence[workload.PodSpec]
                    ) -> list[spec.NodeSpec]:
    """Demand-matched layouts from ``sizing``'s mix in each GPU model's profiles (cpu-only
    nodes kept)."""
    out = list(nodes)
    by_model: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        if n.gpus:
            by_model.setdefault(n.model.id, []).append(i)
    for positions in by_model.values():
        group = [nodes[i] for i in positions]
        gpus = sum(n.gpus for n in group)
        mix = initial.instance_mix(sizing, group[0].model)
        laid = initial.spread(group, initial.demand_matched(group[0].model, mix, gpus))
        for i, n in zip(positions, laid, strict=True):
            out[i] = n
    return out


def _layouts(text: str, nodes: list[spec.NodeSpec], pods: list[workload.PodSpec], *,
             history_share: float) -> tuple[list[spec.NodeSpec], list[workload.PodSpec]]:
    if text == HISTORY:
        sizing, replayed = initial.history_split(pods, history_share)
        return _demand_matched(nodes, sizing), replayed
    if text == initial.DEMAND_MATCHED:
        return _demand_matched(nodes, pods), pods
    shares = initial.parse_proportions(text)
    if shares is not None:
        return initial.proportions(nodes, shares), pods
    gpu_nodes = [n for n in nodes if n.gpus]
    models = {n.model.id for n in gpu_nodes}
    if len(models) != 1:
        raise errors.UsageError(f"--layout {text!r} names one layout cycle for several GPU "
                                f"models ({', '.join(sorted(models))}); use named configs in "
                                f"proportions (all-balanced=50%,...) or history")
    try:
        cycle = initial.resolve(gpu_nodes[0].model, initial.parse_option(text),
                                where="--layout")
    except errors.UsageError as exc:
        if str(exc).startswith("--layout"):
            raise
        raise errors.UsageError(
            f"--layout {text!r}: {exc}. Use history, demand-matched, a mig-parted config "
            f"(all-balanced, all-1g.10gb, all-3g, ...), a profile list "
            f"(3g.40gb,2g.20gb,1g.10gb,1g.10gb), per-GPU layouts separated by ';', or "
            f"configs in proportions (all-balanced=50%,all-7g.80gb=50%)") from None
    laid = iter(initial.assign(gpu_nodes, cycle))
    return [next(laid) if n.gpus else n for n in nodes], pods


def _run_one(job: tuple[Sequence[spec.NodeSpec], Sequence[workload.PodSpec], engine.Policy,
                        int, engine.Options, profiles.Catalog, bool]) -> engine.RunResult:
    nodes, pods, policy, seed, options, catalog, keep = job
    return engine.run(nodes, pods, policy=policy, seed=seed, options=options, catalog=catalog,
                      keep_snapshot=keep)


def _check_outputs(args: argparse.Namespace) -> None:
    """Fail before the simulation, not after it, when an output file cannot be written."""
    for flag, path in (("--json", args.json), ("--report", args.report)):
        if path is None:
            continue
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise errors.UsageError(f"{flag} {path}: no folder {folder}")
        if path.is_dir():
            raise errors.UsageError(f"{flag} {path}: is a folder")
        if not os.access(folder, os.W_OK):
            raise errors.UsageError(f"{flag} {path}: cannot write in {folder}")
        existed = path.exists()
        try:  # opened to append, as it will be written, and left as it was
            with path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise errors.UsageError(f"{flag} {path}: cannot write it: {exc.strerror}"
                                    ) from None
        if not existed:
            path.unlink(missing_ok=True)
    if args.json is not None and args.report is not None and (
            args.json.resolve() == args.report.resolve()):
        raise errors.UsageError(f"--json {args.json} and --report {args.report} are the same "
                                f"file; give each its own")


def _write(flag: str, path: Path, text: str) -> None:
    """An output file written, or one usage-error line naming the flag and the path."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise errors.UsageError(f"{flag} {path}: cannot write it: {exc.strerror} (the "
                                f"results are above)") from None


def _without_scipy(policies: list[engine.Policy], named: bool
                   ) -> tuple[list[engine.Policy], str | None]:
    """The policies that can run here: the bounds are LPs solved with SciPy, an optional
    extra. Named on the command line they need it (a usage error); left out of the default
    list when it is not installed, with the note that says so (for stderr, once the
    arguments have all been checked: a refused command prints its error line alone)."""
    bounds = [p.name for p in policies if p.is_bound]
    if not bounds:
        return policies, None
    try:
        import scipy.optimize  # noqa: F401  (only whether it imports)
    except ImportError:
        if named:
            verb = "needs" if len(bounds) == 1 else "need"
            raise errors.UsageError(f"{' and '.join(bounds)} {verb} SciPy: {SCIPY_HINT}"
                                    ) from None
        note = (f"migfit simulate: {' and '.join(bounds)} left out: they need SciPy "
                f"({SCIPY_HINT})")
        return [p for p in policies if not p.is_bound], note
    return policies, None


def _given(args: argparse.Namespace) -> set[str]:
    """The mode's, inputs' and advisor's flags given on the command line (their dests);
    those not given take their defaults (``FILL_DEFAULTS``, ...). --no-ahead leaves
    ``ahead_from`` None."""
    given = {NO_AHEAD} if getattr(args, NO_AHEAD) else set()
    for defaults in (FILL_DEFAULTS, EVENTS_DEFAULTS, OTHER_DEFAULTS, ADVISOR_DEFAULTS):
        for dest, default in defaults.items():
            if getattr(args, dest) is None:
                setattr(args, dest, default)
            else:
                given.add(dest)
    if NO_AHEAD in given:
        args.ahead_from = None
    return given


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_combinations(args: argparse.Namespace, given: set[str]) -> None:
    """Options that would do nothing with the others given are refused, naming both."""
    if NO_AHEAD in given and "ahead_from" in given:
        raise errors.UsageError("--ahead-from and --no-ahead: --no-ahead turns off the "
                                "re-layouts ahead of demand that --ahead-from starts; give "
                                "one of them")
    pairs = (("--example", args.example, "--pods", args.pods),
             ("--example", args.example, "--nodes", args.nodes),
             ("--cluster", args.cluster, "--nodes", args.nodes),
             ("--synthetic", args.synthetic, "--pods", args.pods))
    for one, has_one, other, has_other in pairs:
        if has_one is not None and has_one is not False and has_other is not None:
            raise errors.UsageError(f"{other} and {one}: {one} replaces {other}'s list; give "
                                    f"one of them")
    # The trace folder holds the node list and the pod list: with both replaced it is never
    # read (a --pods file is still looked for there, by the trace's name).
    nodes_from = ("--cluster" if args.cluster is not None else "--example" if args.example
                  else "--nodes" if args.nodes is not None else None)
    pods_from = ("--synthetic" if args.synthetic is not None else "--example" if args.example
                 else None)
    if args.trace_dir is not None and nodes_from is not None and pods_from is not None:
        by = nodes_from if nodes_from == pods_from else f"{nodes_from} and {pods_from}"
        raise errors.UsageError(f"--trace-dir with {by}: {by} "
                                f"{'replaces' if nodes_from == pods_from else 'replace'} both "
                                f"of the trace's lists, so its folder is never read; leave "
                                f"--trace-dir out")
    if args.picture is not None:
        _needs_output(args, "--picture", "it picks the policies whose GPU pictures the report "
                                         "draws (and --json keeps)")
    if args.synthetic_seed is not None and args.synthetic is None and not args.example:
        raise errors.UsageError("--synthetic-seed without --synthetic or --example: it draws "
                                "synthetic pods; add --synthetic N or leave it out")
    spec_cluster = "--cluster" if args.cluster is not None else (
        "--example" if args.example else None)
    if spec_cluster is not None:
        if args.model_map:
            raise errors.UsageError(f"--model-map with {spec_cluster}: the map is of the "
                                    f"trace node list's models; the cluster spec names its "
                                    f"MIG models itself")
        if "model" in given:
            raise errors.UsageError(f"--model with {spec_cluster}: --model is the MIG model "
                                    f"of the trace's node list; the cluster spec names its "
                                    f"models itself")
    other_mode = EVENTS_DEFAULTS if args.mode == "fill" else FILL_DEFAULTS
    for dest in other_mode:
        if dest in given:
            mode = "events" if args.mode == "fill" else "fill"
            raise errors.UsageError(f"{_flag(dest)} with --mode {args.mode}: it is for --mode "
                                    f"{mode}; leave it out or use --mode {mode}")
    layout = args.layout or (HISTORY if spec_cluster is None else None)
    if "history_share" in given and layout != HISTORY:
        raise errors.UsageError(f"--history-share with --layout {layout or 'from the spec'}: "
                                f"it is for --layout history; leave it out or use --layout "
                                f"history")
    # After the mode's check: in fill mode it is refused as an events flag.
    if args.snapshot_at is not None:
        _needs_output(args, "--snapshot-at", "it sets when the GPU picture of the report (and "
                                             "of --json) is taken")


def _needs_output(args: argparse.Namespace, flag: str, what: str) -> None:
    """``flag``, which shapes only the report and the JSON, refused without either."""
    if args.report is None and args.json is None:
        raise errors.UsageError(f"{flag} without --report or --json: {what}; add --report "
                                f"FILE.html or leave it out")


def check_advisor_flags(args: argparse.Namespace, given: set[str],
                        chosen: Sequence[engine.Policy]) -> None:
    """The advisor's flags (``ADVISOR_DEFAULTS``, --no-ahead) given with no +advisor policy
    among ``chosen`` would change nothing: refused, naming them and what to add."""
    if any(p.advisor for p in chosen):
        return
    dests = [d for dest in ADVISOR_DEFAULTS
             for d in ((dest, NO_AHEAD) if dest == "ahead_from" else (dest,))]
    named = [_given_flag(args, dest) for dest in dests if dest in given]
    if not named:
        return
    them = " ".join(named) if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    pronoun = "it is" if len(named) == 1 else "they are"
    raise errors.UsageError(
        f"{them} with --policies {','.join(p.name for p in chosen)}: {pronoun} for the "
        f"advisor's re-layouts, which only +advisor policies make; add one (such as "
        f"migfit+advisor) to --policies, or leave {'it' if len(named) == 1 else 'them'} out")


def _given_flag(args: argparse.Namespace, dest: str) -> str:
    """The flag that gave ``dest`` as it was spelt: --no-X for a switch turned off."""
    if getattr(args, dest) is False:
        return "--no-" + dest.replace("_", "-")
    return _flag(dest)


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric flags in their ranges (finite ones): one line that says the range."""
    seconds = (("--fill-interval", args.fill_interval),
               ("--advise-interval", args.advise_interval),
               ("--advisor-grace", args.advisor_grace),
               ("--advisor-free-grace", args.advisor_free_grace))
    for flag, value in seconds:
        if not (math.isfinite(value) and value >= 0):
            raise errors.UsageError(f"{flag} {value:g}: use 0 or more seconds")
    if not (math.isfinite(args.history_share) and 0 < args.history_share < 1):
        raise errors.UsageError(f"--history-share {args.history_share:g}: use a share "
                                f"between 0 and 1 (0.5 = the first half sizes the layouts)")
    if not MIN_SAMPLES <= args.samples <= MAX_SAMPLES:
        raise errors.UsageError(f"--samples {args.samples}: use {MIN_SAMPLES} to "
                                f"{MAX_SAMPLES:,} points per time series (the "
                                f"idle-while-pending figure integrates them)")
    if args.jobs < 1:
        raise errors.UsageError(f"--jobs {args.jobs}: use 1 or more processes")
    if args.extender_weight < 1:
        raise errors.UsageError(f"--extender-weight {args.extender_weight}: use 1 or more "
                                f"(kube-scheduler refuses an extender weight of 0 or less)")
    if not 1 <= args.gpu_weight <= 100:
        raise errors.UsageError(f"--gpu-weight {args.gpu_weight}: use 1 to 100 (kube-scheduler's "
                                f"range for a resource weight)")


def run(args: argparse.Namespace) -> int:
    given = _given(args)
    catalog = profiles.load(args.catalog)
    policies, left_out = _without_scipy(_policies(args.policies),
                                        args.policies != DEFAULT_POLICIES)
    if args.seeds < 1:
        raise errors.UsageError("--seeds must be at least 1")
    names = [p.name for p in policies]
    for name in args.picture or ():
        if name not in names:
            raise errors.UsageError(f"--picture {name}: not a policy of this run; use one of "
                                    f"--policies: {', '.join(names)}")
    if not (math.isfinite(args.target) and 0 < args.target <= MAX_TARGET):
        raise errors.UsageError(f"--target {args.target:g}: use a share of the cluster's GPUs "
                                f"above 0 and at most {MAX_TARGET:g} (1.3 = 130 % of GPU "
                                f"capacity)")
    _check_outputs(args)
    if not 0 <= args.percentage_of_nodes_to_score <= 100:
        raise errors.UsageError(f"--percentage-of-nodes-to-score "
                                f"{args.percentage_of_nodes_to_score}: must be 0 (adaptive) "
                                f"to 100")
    _check_numbers(args)
    if args.ahead_from is not None and not 0 <= args.ahead_from <= 1:
        raise errors.UsageError(f"--ahead-from {args.ahead_from:g}: use a share from 0 (from "
                                "the start) to 1, or --no-ahead")
    if not (math.isfinite(args.relayout_seconds) and args.relayout_seconds >= 0):
        raise errors.UsageError(f"--relayout-seconds {args.relayout_seconds:g}: use 0 or more "
                                f"seconds (the MIG Manager's re-partition time)")
    if not 0 <= args.config_sync_seconds <= 3600:
        raise errors.UsageError(f"--config-sync-seconds "
                                f"{flagtypes.shown(args.config_sync_seconds)}: use 0 to 3600, "
                                "as the extender's --config-sync")
    if not 0 < args.arrival_scale <= MAX_ARRIVAL_SCALE:
        raise errors.UsageError(f"--arrival-scale {args.arrival_scale:g}: use a factor above 0 "
                                f"and at most {MAX_ARRIVAL_SCALE:,.0f} (0.05 = arrivals 20 times "
                                f"as fast)")
    check_combinations(args, given)
    check_advisor_flags(args, given, policies)
    nodes, pods, info = _inputs(args, catalog)
    _check_clock(args, pods)
    options = engine.Options(
        percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
        allocation=args.allocation, gpu_weight=args.gpu_weight, busy_nodes=args.busy_nodes,
        ahead_from=args.ahead_from, balance=args.balance,
        gpu_usage=args.gpu_usage, score_all_pods=args.score_all_pods,
        arrival_scale=args.arrival_scale, webhook_choice=args.webhook_choice,
        mode=args.mode, target=args.target, order=args.order, fill_interval=args.fill_interval,
        relayout_seconds=args.relayout_seconds, advise_interval=args.advise_interval,
        config_sync_seconds=args.config_sync_seconds,
        max_relayouts=_relayout_limit(args.max_relayouts, nodes),
        advisor_grace=args.advisor_grace,
        advisor_free_grace=args.advisor_free_grace,
        advisor=args.advisor,
        extender_weight=args.extender_weight,
        samples=args.samples, snapshot_at=args.snapshot_at)
    pictures = args.picture or list(DEFAULT_PICTURES)
    seeds = list(range(args.seed, args.seed + args.seeds))
    jobs = [(nodes, pods, p, s, options, catalog, s == seeds[0] and p.name in pictures)
            for s in seeds for p in policies]
    if left_out is not None:
        print(left_out, file=sys.stderr, flush=True)
    print(start_notice(args, info, runs=len(jobs),
                       arrivals=arrivals_per_run(args, pods, int(info["gpus"]))),
          file=sys.stderr, flush=True)
    for line in unplaceable(nodes, pods):
        print(line, file=sys.stderr, flush=True)
    started = time.perf_counter()
    results: list[engine.RunResult] = []
    if args.jobs > 1 and len(jobs) > 1:
        results = _run_in_pool(jobs, args.jobs)
    else:
        for job in jobs:
            results.append(_run_one(job))
            print(f"  {job[2].name:18} seed {job[3]}: {results[-1].wall_s:.1f} s",
                  file=sys.stderr)
    elapsed = time.perf_counter() - started
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for p in policies:
        summary[p.name] = metrics.aggregate([r.figures for r in results if r.policy == p.name])
    command = "migfit simulate " + " ".join(shlex.quote(a) for a in sys.argv[2:]) \
        if len(sys.argv) > 1 and sys.argv[1] == "simulate" else "migfit simulate"
    setup: dict[str, Any] = {
        "command": command, **info, "mode": options.mode,
        "target": options.target if options.mode == "fill" else None,
        "order": options.order, "relayout_seconds": options.relayout_seconds,
        "config_sync_seconds": options.config_sync_seconds,
        "max_relayouts": options.max_relayouts,
        "extender_weight": options.extender_weight, "advisor": options.advisor,
        "advisor_grace_s": options.advisor_grace,
        "advisor_free_grace_s": options.advisor_free_grace,
        "percentage_of_nodes_to_score": options.percentage_of_nodes_to_score or "adaptive",
        "allocation": options.allocation, "busy_nodes": options.busy_nodes,
        "ahead_from": options.ahead_from, "balance": options.balance,
        "gpu_usage": options.gpu_usage, "score_all_pods": options.score_all_pods,
        "arrival_scale": options.arrival_scale, "node_share": args.node_share,
        "snapshot_at": options.snapshot_at if options.mode == "events" else None,
        "webhook_choice": options.webhook_choice or choice.Policy().contention,
        "seeds": seeds,
        "code": adapters.sources(), "elapsed_s": round(elapsed, 2),
        "definitions": metrics.__doc__ or "",
    }
    kept = (f" (--node-share {args.node_share:g}: {info['node_share_kept']})"
            if "node_share_kept" in info else "")
    print(f"{_count(info['nodes'], 'node')}{kept}, {_count(info['gpus'], 'GPU')} "
          f"({info['models']}); "
          f"{info['pods_in_workload']} pods, mapping={args.mapping}, mode={options.mode}"
          + (f", target {_share(options.target)} of GPUs requested" if options.mode == "fill"
             else "") + f"; seeds {seeds[0]}..{seeds[-1]}")
    print("code: " + ", ".join(f"{k}={v}" for k, v in adapters.sources().items()))
    print(report.table(summary))
    if options.mode == "events":
        for line in report.never_placed(summary):
            print(line)
    if args.markdown:
        print()
        print(report.markdown(summary, events=options.mode == "events"))
    if args.waits_by_class:
        print()
        print(report.waits_table([(r.policy, r.waits_by_class) for r in results
                                  if r.waits_by_class]))
    print(f"{_count(len(results), 'run')} in {elapsed:.1f} s")
    document: dict[str, Any] = {
        "setup": setup, "summary": summary,
        "runs": [{"policy": r.policy, "seed": r.seed, "figures": r.figures,
                  "waits_by_class": r.waits_by_class,
                  "series": r.series, "snapshot": r.snapshot} for r in results],
    }
    if args.json is not None:
        _write("--json", args.json, report.json_text(document))
        print(f"wrote {args.json}")
    if args.report is not None:
        _write("--report", args.report, report.html_page(document, pictures=pictures))
        print(f"wrote {args.report}")
    return 0
