"""`shoal simulate`: run the real scheduling core on a cluster described by plain manifests."""

from __future__ import annotations

import argparse
import json
import sys
import time

from shoal.cli.manifests import ManifestError, Origin, load_documents, one_line
from shoal.cli.simulate_output import render_json, render_table, timings_json
from shoal.cli.simulation import DEFAULT_NOW, simulate
from shoal.core.fields import mapping
from shoal.core.ingest import parse_time
from shoal.core.ingest.common import IngestError

DESCRIPTION = f"""\
Run the real Shoal scheduling core for N cycles on manifests (no Kafka, Redis or Kubernetes).

INPUT (-f, repeatable): YAML (multi-document) or JSON files, or directories (walked in sorted
order; *.yaml, *.yml, *.json, *.zip, *.gzip). `kind: List` documents are unpacked, and a KAI
snapshot (the zip from the scheduler's /get-snapshot, or its snapshot.json) is replayed from its
rawObjects and config.actions. Understood kinds:
  Node (status.allocatable cpu/memory/pods/nvidia.com/gpu, labels incl. nvidia.com/gpu.memory and
    kai.scheduler/node-pool, spec.taints, spec.unschedulable, Ready condition),
  Pod (requests = max(sum of containers, any init container); nvidia.com/gpu; annotations
    gpu-fraction / gpu-memory / gpu-fraction-num-devices; labels kai.scheduler/queue (or
    runai/queue), kai.scheduler/subgroup-name, runai-gpu-group; annotation pod-group-name;
    spec.nodeName = running there; spec.schedulerName must be one of the SchedulerConfig
    schedulerNames (default shoal-scheduler, kai-scheduler), other pods only use capacity;
    metadata.deletionTimestamp = releasing; nodeSelector, required node affinity, tolerations),
  Queue (scheduling.run.ai/v2; gpu in devices, cpu in millicores, memory in megabytes (10^6 B);
    an omitted limit means limit = quota, -1 unlimited, an omitted resource section means
    quota 0 / limit 0 / weight 0), PodGroup (scheduling.run.ai/v2alpha2), PriorityClass (Shoal's
    train 50, build-preemptible 75, build 100, inference 125 always exist; input overrides by name),
  Topology (kai.scheduler/v1alpha1), workload owners (batch Job, CronJob, Deployment, ReplicaSet,
    StatefulSet, JobSet, LeaderWorkerSet, PyTorchJob/TFJob/MPIJob/XGBoostJob/JAXJob, RayCluster/
    RayJob): a workload with no pods in the input gets its pods as its controller would create
    them (Job: <job>-<i> x parallelism; Deployment/ReplicaSet/StatefulSet: <name>-<i> x replicas),
  and one SchedulerConfig (apiVersion shoal.io/v1alpha1, here or via --config, which wins):
    spec.placementStrategy {{gpu, cpu}}, actions, minRuntime {{preemptMinRuntime, reclaimMinRuntime}}, kValue, usage
    {{queue: {{gpu, cpu, memory}}}}, reservationNamespace, schedulerNames, schedulePeriod (default 1s),
    victimBudget (simulated victims per eviction action and cycle, default 10000) and victimBudgetPerJob
    (per job searched, default 1000; a job that spends it is reported VictimSearchBudgetExhausted and the
    next jobs are still searched), maxConsolidationPreemptees (16).
Other kinds (ConfigMap, Service, ...) are ignored; a document without `kind` is an error.
Pods without a PodGroup are grouped by the podgrouper rules (Job: pg-<job>-<uid>, min member from
kai.scheduler/batch-min-member; Deployment: one group per pod, priority inference; ...). Queues are
not invented: a pod whose queue is missing gets QueueDoesNotExist (KAI's Helm default queues
default-parent-queue/default-queue must be in the input if you rely on them).

EACH CYCLE runs all enabled actions once; then binds take effect, pipelined pods keep
nominatedNode, evicted pods disappear (one with a controller owner comes back pending as
<pod>-r<cycle>), and the clock advances by schedulePeriod. --now sets the start time (RFC3339;
default: the latest metadata.creationTimestamp in the input, but not before {DEFAULT_NOW}).

OUTPUT (--output json, the default when stdout is not a terminal) is one JSON object:
  {{"cycles": [{{"cycle": 1, "binds": [{{"pod": "ns/name", "node": "n1", "gpuGroups": [], "fraction": null}}],
    "pipelined": [{{"pod", "node"}}], "evictions": [{{"pod", "action", "by": "ns/podgroup", "message"}}],
    "unschedulable": [{{"podGroup": "ns/name", "reason", "message"}}],
    "queues": {{"<queue>": {{"gpu": {{"deserved", "fairShare", "allocated", "limit"}}, "cpu": {{…}}, "memory": {{…}}}}}}}}],
   "final": {{"pods": {{"ns/name": {{"node", "phase", "nominatedNode"}}}},
             "podGroups": {{"ns/pg": {{"running", "pending", "pipelined"}}}}}}}}
  Lists are sorted by pod / podGroup name. Queue figures: gpu in GPUs (0.5 allowed), cpu in
  millicores, memory in bytes; -1 = unlimited. fraction is the GPU portion per device (0.5) or null.
  final.podGroups counts each group's active pods (a pipelined pod is not pending).
--timings FILE writes a JSON list, per cycle: {{"cycle", "snapshot_build_ms", "total_duration_ms",
  "action_durations_ms": {{"allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"}},
  "evictions": {{"<action>": {{"evictions", "placed", "pipelined"}}}}, "counters": {{"<action>.victims_simulated",
  "<action>.victims_skipped", "<action>.job_budget_exhausted", "<action>.budget_exhausted"}}}}.
Bad input exits 2 with `file:document: field: problem` lines on stderr (documents count from 1)
and prints nothing on stdout.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("simulate", help="run the scheduling core on manifests",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-f", "--filename", dest="paths", action="append", required=True, metavar="PATH",
                        help="manifest file or directory (repeatable)")
    parser.add_argument("--cycles", type=int, default=1, metavar="N", help="cycles to run (default 1)")
    parser.add_argument("--config", metavar="FILE", help="a SchedulerConfig document (shoal.io/v1alpha1)")
    parser.add_argument("--now", metavar="RFC3339", help="start time (default: the latest creationTimestamp in the input, at least " + DEFAULT_NOW + ")")
    parser.add_argument("--output", choices=("json", "table"), help="json (default when not a terminal) or table")
    parser.add_argument("--timings", metavar="FILE", help="write per-cycle timings (JSON list) to FILE")
    parser.set_defaults(func=run)
    return parser


def _fail(lines: list[str]) -> int:
    for line in lines:
        print(one_line(line), file=sys.stderr)
    return 2


def _load_config(path: str) -> tuple[dict | None, list[str]]:
    try:
        docs, origins = load_documents([path])
    except ManifestError as exc:
        return None, exc.lines
    configs = [(d, o) for d, o in zip(docs, origins, strict=True)]
    if len(configs) != 1 or not isinstance(configs[0][0], dict):
        return None, [f"{path}:1: document: --config must hold exactly one SchedulerConfig document"]
    doc, origin = configs[0]
    if doc.get("kind") not in (None, "SchedulerConfig"):
        return None, [f"{origin.where('kind')}: must be SchedulerConfig"]
    return doc, []


def _where(index: int, field: str, origins: list[Origin], docs: list, config_path: str | None) -> str:
    if index < 0:
        return f"{config_path}:1: {field or 'document'}" if config_path else f"(generated): {field or 'document'}"
    if index < len(origins):
        return origins[index].where(field)
    doc = docs[index] if index < len(docs) else {}
    refs = mapping(doc, "metadata").get("ownerReferences")
    owner = refs[0].get("name") if isinstance(refs, list) and refs and isinstance(refs[0], dict) else None
    for i, candidate in enumerate(docs[: len(origins)]):
        if owner is not None and mapping(candidate, "metadata").get("name") == owner:
            name = mapping(doc, "metadata").get("name")
            return origins[i].where(f"spec.template (pod {name}): {field}" if field else "spec.template")
    return f"(generated): {field or 'document'}"



def run(args: argparse.Namespace) -> int:
    if args.cycles < 1:
        return _fail(["--cycles: must be at least 1"])
    now = None
    if args.now:
        try:
            now = parse_time(args.now, "--now")
        except IngestError:
            return _fail([f"--now: invalid RFC3339 timestamp {args.now!r}"])
    config_doc = None
    if args.config:
        config_doc, errors = _load_config(args.config)
        if errors:
            return _fail(errors)
    try:
        docs, origins = load_documents(args.paths)
    except ManifestError as exc:
        return _fail(exc.lines)
    from shoal.core.ingest import format_time

    result = simulate(docs, cycles=args.cycles, now=format_time(now) if now else None, config_doc=config_doc,
                      timer=time.perf_counter)
    if result.problems:
        all_docs = result.documents
        return _fail([f"{_where(p.index, p.field, origins, all_docs, args.config)}: {p.message}"
                      for p in result.problems])
    output = args.output or ("table" if sys.stdout.isatty() else "json")
    if args.timings:
        with open(args.timings, "w", encoding="utf-8") as handle:
            json.dump(timings_json(result), handle, indent=2)
            handle.write("\n")
    if output == "json":
        sys.stdout.write(json.dumps(render_json(result), sort_keys=False, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(render_table(result))
    return 0

