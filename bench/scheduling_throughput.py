"""Scheduling throughput (pods/s) of kube-scheduler with and without our extender, and with claims.

Runs against the local control plane of tests/k8s (start it with tests/k8s/scripts/run-bench.sh,
which is what `make -C tests/k8s bench` does). For each node count it creates simulated GPU nodes
(kwok, 2 x 12 GiB GPUs each), then, once per scheduler configuration:

1. stops kube-scheduler and creates the pods, all Pending;
2. starts kube-scheduler (plain: the default plugins only; extender: our extender as
   roles/vgpu_stack configures it, filter-tightest and bind; extender-weighted: filter,
   prioritize and bind; claims: the default plugins only, the pods asking through DRA) and waits
   until it is ready;
3. watches the pods and takes the rate from the first bind to the last one.

Single runs on a small machine swing by tens of percent (the control plane, kwok and the
extender share its cores), so the modes take turns, `--repeat` rounds of them, and the ratio is
taken between the medians. New nodes are given `--settle` seconds first: kwok's first status
updates of a thousand nodes would otherwise land in whichever run comes first.

Both configurations schedule the same pods (1000 MiB = 10 units of vgpu.io/gpu-memory each);
without the extender kube-scheduler counts the resource per node, with it the extender places
each pod on one GPU. The ratio extender/plain is printed; the target is >= 0.5 at 1000 nodes.

The claims mode (docs/dra.md) asks for the same 1000 MiB through a ResourceClaimTemplate of our
DeviceClass, and kube-scheduler allocates it from the ResourceSlice each node has (published by the
DRA driver's own code, as its slice publisher would). Its pods are created, and kube-controller-manager
has made every pod's ResourceClaim, before kube-scheduler starts: the run times the scheduler
alone, as for the other modes. Target: claims/plain >= 0.9 at 1000 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from bench import _components_path
from tests.k8s import cluster, dra_objects

POD_MIB = 1000
GROUP = "bench"
# scheduler config file (in the state folder) per mode; see tests/k8s/scripts/up.sh.
MODES = {
    "plain": "scheduler-plain.yaml",  # no extender
    "extender": "scheduler-extender.yaml",  # as roles/vgpu_stack ships it: packing "tightest"
    "extender-weighted": "scheduler-extender-weighted.yaml",  # packing "weighted": + prioritize
    "extender-ignored": "scheduler-extender-ignored.yaml",  # tightest, ignoredByScheduler: true
    "claims": "scheduler-plain.yaml",  # no extender: DRA claims allocated by kube-scheduler itself
}
CLAIM_TEMPLATE = "gpu-bench"
DEFAULT_MODES = ["plain", "extender", "extender-weighted"]
# The extender verbs whose calls and time each run reports.
VERBS = ("filter", "filter-tightest", "prioritize", "bind")


def ensure_nodes(core: Any, count: int) -> dict[str, str]:
    """Grow the bench node set to `count` Ready nodes; returns their selector."""
    existing = {n.metadata.name for n in core.list_node(label_selector=f"{cluster.GROUP_LABEL}={GROUP}").items}
    wanted = [f"bench-{i:04d}" for i in range(count)]
    missing = [n for n in wanted if n not in existing]
    body = [cluster.GPU_12GIB, cluster.GPU_12GIB]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: core.create_node(cluster.node_body(n, body, {cluster.GROUP_LABEL: GROUP})), missing))

    def all_ready() -> bool:
        nodes = core.list_node(label_selector=f"{cluster.GROUP_LABEL}={GROUP}").items
        return sum(cluster.node_ready(n) for n in nodes) >= count

    cluster.wait_for(f"{count} bench nodes Ready", all_ready, timeout=max(120, count / 5))
    return {cluster.GROUP_LABEL: GROUP}


def ensure_dra(nodes: int) -> None:
    """The DeviceClass and the ResourceSlice of each bench node (2 x 12 GiB, as their annotation)."""
    resource: Any = client.ResourceV1Api(cluster.api_client())
    try:
        resource.create_device_class(dra_objects.device_class_body())
    except ApiException as exc:
        if exc.status != 409:
            raise
    api = dra_objects.dra_api()
    gpus = [cluster.GPU_12GIB, cluster.GPU_12GIB]
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-dra") as folder:

        def publish(name: str) -> None:
            dra_objects.publish_slice(api, name, gpus, Path(folder))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(publish, [f"bench-{i:04d}" for i in range(nodes)]))


def create_pods(core: Any, mode: str, namespace: str, names: list[str], selector: dict[str, str]) -> None:
    """The run's pods, all Pending (kube-scheduler is stopped); for claims, also their claims."""
    if mode != "claims":
        bodies = [cluster.pod_body(n, POD_MIB, selector) for n in names]
    else:
        resource: Any = client.ResourceV1Api(cluster.api_client())
        template = dra_objects.claim_template_body(CLAIM_TEMPLATE, POD_MIB)
        resource.create_namespaced_resource_claim_template(namespace, template)
        bodies = [dra_objects.pod_body(n, CLAIM_TEMPLATE, selector) for n in names]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))
    if mode == "claims":
        # kube-controller-manager makes each pod's claim from the template (at its own client rate).
        resource = client.ResourceV1Api(cluster.api_client())
        cluster.wait_for(
            f"{len(names)} ResourceClaims in {namespace}",
            lambda: len(resource.list_namespaced_resource_claim(namespace).items) >= len(names),
            timeout=max(120, len(names) / 5),
        )


class BindWatch(threading.Thread):
    """Records when each pod of a namespace is first seen bound.

    A watch that ends early (a dropped connection on a loaded machine) is resumed from a fresh
    list; pods found bound by that list are stamped with the time of the list and counted in
    `late`, so a run can tell how much its timing leaned on them.
    """

    def __init__(self, namespace: str, expected: int, resource_version: str, timeout: float) -> None:
        super().__init__(daemon=True)
        self.namespace = namespace
        self.expected = expected
        self.resource_version = resource_version
        self.deadline = time.monotonic() + timeout
        self.bound: dict[str, float] = {}
        self.late = 0
        self.done = threading.Event()
        self.core = client.CoreV1Api(cluster.api_client())

    def _seen(self, pod: Any, late: bool = False) -> None:
        if pod.spec.node_name and pod.metadata.name not in self.bound:
            self.bound[pod.metadata.name] = time.monotonic()
            self.late += late

    def run(self) -> None:
        try:
            while len(self.bound) < self.expected and time.monotonic() < self.deadline:
                try:
                    stream = watch.Watch().stream(
                        self.core.list_namespaced_pod,
                        self.namespace,
                        resource_version=self.resource_version,
                        timeout_seconds=max(1, int(self.deadline - time.monotonic())),
                    )
                    for event in stream:
                        self._seen(event["object"])
                        if len(self.bound) >= self.expected:
                            return
                except Exception as exc:
                    print(f"watch of {self.namespace} ended ({exc}); listing again", file=sys.stderr)
                listing: Any = self.core.list_namespaced_pod(self.namespace)
                for pod in listing.items:
                    self._seen(pod, late=True)
                self.resource_version = str(listing.metadata.resource_version)
        finally:
            self.done.set()


def extender_metrics() -> dict[str, Any]:
    """The extender's counters that explain its rate: refused binds, time and count per verb, the
    latency histogram's buckets per verb ({verb: {upper bound: count}}) and its resident memory."""
    text = cluster.extender_get("/metrics").decode()
    wanted = {
        'vgpu_extender_binds_total{outcome="error"}': "failed_binds",
        "vgpu_extender_connections_total": "connections",
        "process_resident_memory_bytes": "rss_bytes",
    }
    for verb in VERBS:
        wanted[f'vgpu_extender_request_seconds_sum{{verb="{verb}"}}'] = f"{verb}_s"
        wanted[f'vgpu_extender_request_seconds_count{{verb="{verb}"}}'] = f"{verb}_n"
    values: dict[str, Any] = dict.fromkeys(wanted.values(), 0.0)
    buckets: dict[str, dict[float, float]] = {verb: {} for verb in VERBS}
    values["buckets"] = buckets
    for line in text.splitlines():
        key, _sep, value = line.rpartition(" ")
        if key in wanted:
            values[wanted[key]] = float(value)
        elif key.startswith("vgpu_extender_request_seconds_bucket{"):
            labels = dict(part.split("=", 1) for part in key[key.index("{") + 1 : -1].split(","))
            verb = labels.get("verb", "").strip('"')
            if verb in buckets:
                buckets[verb][float(labels["le"].strip('"'))] = float(value)
    return values


def apiserver_binds() -> tuple[float, float]:
    """(seconds, count) kube-apiserver has spent on Bindings so far: its own time per bind, the
    same in every mode, which the extender's bind time contains."""
    api = cluster.api_client()
    response = api.call_api(*api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]), _request_timeout=30)
    seconds = count = 0.0
    for line in response.read().decode().splitlines():
        if 'verb="POST"' in line and 'resource="pods"' in line and 'subresource="binding"' in line:
            key, _sep, value = line.rpartition(" ")
            if key.startswith("apiserver_request_duration_seconds_sum{"):
                seconds += float(value)
            elif key.startswith("apiserver_request_duration_seconds_count{"):
                count += float(value)
    return seconds, count


def scheduler_cycle() -> dict[str, float]:
    """kube-scheduler's cycle times (cycle_from_metrics) from its /metrics, which the harness opens
    on loopback; each run starts a fresh kube-scheduler, so its counts are the run's."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    port = os.environ.get("SCHEDULER_PORT", "20259")
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=30, context=context) as response:
        return cycle_from_metrics(response.read().decode())


# (name, histogram, label a line must carry): parts of kube-scheduler's serial cycle, each
# observed once per pod (its Filter plugins are timed per node, and only sampled).
CYCLE_PARTS = (
    ("algorithm", "scheduler_scheduling_algorithm_duration_seconds", ""),
    ("prefilter", "scheduler_framework_extension_point_duration_seconds", 'extension_point="PreFilter"'),
    ("score", "scheduler_framework_extension_point_duration_seconds", 'extension_point="Score"'),
)


def cycle_from_metrics(text: str) -> dict[str, float]:
    """Mean milliseconds per pod of kube-scheduler's scheduling algorithm (from the pod's pop off
    the queue: PreFilter, the Filter plugins over the nodes, the extenders' filter calls, scoring),
    and of its PreFilter and Score plugins. The algorithm is the serial part of a pod's cycle; its
    difference between the extender's mode and plain is what the extender's call adds there."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        key, _sep, value = line.rpartition(" ")
        for name, histogram, label in CYCLE_PARTS:
            if label not in key:
                continue
            if key.startswith(histogram + "_sum"):
                sums[name + "_s"] = sums.get(name + "_s", 0.0) + float(value)
            elif key.startswith(histogram + "_count"):
                sums[name + "_n"] = sums.get(name + "_n", 0.0) + float(value)
    cycle = {}
    for name, _histogram, _label in CYCLE_PARTS:
        count = sums.get(name + "_n", 0.0)
        cycle[f"{name}_ms"] = round(1000 * sums.get(name + "_s", 0.0) / count, 3) if count else 0.0
    return cycle


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """The q-quantile (seconds) of the requests counted between two reads of a histogram's
    cumulative buckets, interpolated within its bucket as Prometheus' histogram_quantile does."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if bound == float("inf"):
                return lower  # beyond the last finite bucket: its bound is all that is known
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below else bound
        lower, below = bound, count
    return lower


def delete_run(core: Any, namespace: str) -> None:
    """Delete a run's pods and namespace. A delete-collection of 10 000 pods can outlast
    kube-apiserver's 60 s request timeout on a small machine (a 504, or at 50 000 pods the
    connection closed without an answer); the namespace's deletion then removes the rest, and the
    caller waits until they are gone."""
    try:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        if isinstance(exc, ApiException) and exc.status != 504:
            raise
        print(
            f"deleting the pods of {namespace} did not finish ({exc}); the namespace's deletion removes the rest",
            file=sys.stderr,
        )
    core.delete_namespace(namespace)


def process_cpu() -> dict[str, tuple[int, float]]:
    """CPU seconds (user + system) so far of each process the harness started, by name, with its PID
    (tests/k8s's state folder keeps "<pid> <start time>" per process)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid_file in sorted((cluster.STATE_DIR / "pids").glob("*.pid")):
        try:
            pid = int(pid_file.read_text().split()[0])
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            continue  # stopped: kube-scheduler between runs
        found[pid_file.stem] = (pid, (int(fields[11]) + int(fields[12])) / tick)  # utime, stime
        for child in _children(pid):  # the extender's poster process, counted on its own
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[f"{pid_file.stem}-child"] = (child, (int(fields[11]) + int(fields[12])) / tick)
    return found


def _children(pid: int) -> list[int]:
    """The process's children: each thread's (/proc/PID/task/TID/children lists those the thread
    started; the extender starts its poster from a thread of its own)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_per_pod(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], pods: int
) -> dict[str, float]:
    """Milliseconds of CPU each process spent per pod between two readings (a process started in
    between, kube-scheduler, counts from its start)."""
    spent = {}
    for name, (pid, seconds) in after.items():
        earlier = before.get(name)
        used = seconds - earlier[1] if earlier is not None and earlier[0] == pid else seconds
        spent[name] = round(1000 * used / pods, 2)
    spent["total"] = round(sum(spent.values()), 2)
    return spent


def idle_cpu(seconds: float) -> dict[str, float]:
    """Milliseconds of CPU per second each process spends with nothing to schedule (kwok's node
    status updates, their watchers): the background that every run pays for as long as it lasts."""
    before = process_cpu()
    time.sleep(seconds)
    after = process_cpu()
    return {name: round(ms / seconds, 1) for name, ms in cpu_per_pod(before, after, 1).items()}


def cleanup_timeout(pods: int) -> float:
    """Seconds to wait for a run's pods to go: 120, or 20 pods a second for large runs."""
    return max(120.0, pods / 20)


def run_plan(node_counts: list[int], repeat: int, modes: list[str]) -> Iterator[tuple[int, int, str, bool]]:
    """(nodes, round, mode, clean up after it) of each run, smallest cluster first, the modes taking
    turns. The last run is not cleaned up: its pods go with the cluster (run-bench.sh's down.sh),
    and their deletion, which nothing reads, outlasts the run itself at 50 000 pods."""
    plan = [(nodes, round_, mode) for nodes in sorted(node_counts) for round_ in range(repeat) for mode in modes]
    for index, (nodes, round_, mode) in enumerate(plan):
        yield nodes, round_, mode, index < len(plan) - 1


def run_once(
    core: Any, mode: str, nodes: int, *, pods: int, selector: dict[str, str], timeout: float
) -> dict[str, Any]:
    cluster.ctl("stop-scheduler")
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    cluster.wait_for(
        "the bench namespace's default service account",
        lambda: bool(core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items),
        timeout=60,
    )
    names = [f"p-{i:05d}" for i in range(pods)]
    create_pods(core, mode, namespace, names, selector)
    rv = core.list_namespaced_pod(namespace, limit=1).metadata.resource_version
    watcher = BindWatch(namespace, pods, rv, timeout)
    watcher.start()
    before = extender_metrics()
    binds_before = apiserver_binds()
    cpu_before = process_cpu()
    cluster.ctl("start-scheduler", str(cluster.STATE_DIR / MODES[mode]))
    finished = watcher.done.wait(timeout + 30)
    cpu_after = process_cpu()
    times = sorted(watcher.bound.values())
    result: dict[str, Any] = {"mode": mode, "nodes": nodes, "pods": pods, "bound": len(times), "late": watcher.late}
    if not finished or len(times) < pods:
        result["error"] = f"only {len(times)} of {pods} pods bound within {timeout:.0f} s"
    try:
        result["scheduler_cycle"] = scheduler_cycle()
    except OSError as exc:
        print(f"kube-scheduler's metrics unread: {exc}", file=sys.stderr)
    binds_after = apiserver_binds()
    bound_calls = binds_after[1] - binds_before[1]
    if bound_calls:
        result["apiserver_bind_mean_ms"] = round(1000 * (binds_after[0] - binds_before[0]) / bound_calls, 2)
    if mode.startswith("extender"):
        after = extender_metrics()
        # Binds the extender refused because the GPU filled up after filter said it fit.
        result["failed_binds"] = int(after["failed_binds"] - before["failed_binds"])
        result["connections"] = int(after["connections"] - before["connections"])
        for verb in VERBS:
            calls = after[f"{verb}_n"] - before[f"{verb}_n"]
            spent = after[f"{verb}_s"] - before[f"{verb}_s"]
            result[f"{verb}_calls"] = int(calls)
            result[f"{verb}_mean_ms"] = round(1000 * spent / calls, 2) if calls else 0.0
            for name, q in (("p50", 0.5), ("p99", 0.99)):
                seconds = quantile(q, before["buckets"][verb], after["buckets"][verb]) if calls else None
                result[f"{verb}_{name}_ms"] = round(1000 * seconds, 2) if seconds is not None else 0.0
        result["extender_rss_mib"] = round(after["rss_bytes"] / 2**20, 1)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    result["seconds"] = round(span, 3)
    result["pods_per_s"] = round((len(times) - 1) / span, 1) if span > 0 else 0.0
    # Where a pod's CPU goes, by process: on a machine with no idle core the rate is what it costs.
    result["cpu_ms_per_pod"] = cpu_per_pod(cpu_before, cpu_after, max(1, len(times)))
    result["namespace"] = namespace
    return result


def clean_up(core: Any, namespace: str, pods: int) -> None:
    """A run's pods and claims gone. The extender must see the deletions before the next run
    counts GPU memory again, and kube-scheduler the claims' (they go with their pods)."""
    delete_run(core, namespace)
    resource = client.ResourceV1Api(cluster.api_client())
    cluster.wait_for(
        f"pods and claims of {namespace} gone",
        lambda: (
            not core.list_namespaced_pod(namespace, limit=1).items
            and not resource.list_namespaced_resource_claim(namespace, limit=1).items
        ),
        timeout=cleanup_timeout(pods),
    )
    time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000], help="node counts (default 100 1000)")
    parser.add_argument("--pods", type=int, default=500, help="pods per run (default 500)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed per run (default 300)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of all modes per node count (default 3)")
    parser.add_argument("--settle", type=float, default=30, help="seconds to wait after adding nodes (default 30)")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES),
        default=DEFAULT_MODES,
        help=f"configurations to run, plain among them (default {' '.join(DEFAULT_MODES)})",
    )
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.pods < 2:
        parser.error(f"--pods must be at least 2, got {args.pods}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if "plain" not in args.modes:
        parser.error(f"--modes {' '.join(args.modes)}: plain is the baseline of every ratio; add it")
    capacity = min(args.nodes) * 2 * (cluster.GPU_12GIB // POD_MIB)
    if args.pods > capacity:
        parser.error(f"--pods {args.pods} do not fit on {min(args.nodes)} nodes ({capacity} pods of {POD_MIB} MiB)")

    core = client.CoreV1Api(cluster.api_client())
    print(json.dumps({"src": str(_components_path.ROOT), "modes": args.modes}), flush=True)
    results = []
    selector: dict[str, str] = {}
    prepared = 0
    for nodes, round_, mode, clean in run_plan(args.nodes, args.repeat, args.modes):
        if nodes != prepared:
            selector = ensure_nodes(core, nodes)
            if "claims" in args.modes:
                ensure_dra(nodes)
            time.sleep(args.settle)
            idle = idle_cpu(10.0)
            print(json.dumps({"nodes": nodes, "idle_cpu_ms_per_s": idle}), flush=True)
            prepared = nodes
        result = run_once(core, mode, nodes, pods=args.pods, selector=selector, timeout=args.timeout)
        result["round"] = round_
        # Printed before the cleanup, which can outlast the run itself at 50 000 pods.
        print(json.dumps(result), flush=True)
        results.append(result)
        if clean:
            clean_up(core, result["namespace"], args.pods)
        else:
            print(f"the last run's pods are left in {result['namespace']} for the cluster's tear-down", file=sys.stderr)
    cluster.ctl("stop-scheduler")
    cluster.ctl("start-scheduler")

    summary = summarize(results)
    print_summary(summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "runs": results}, indent=2) + "\n")
    return 1 if any("error" in r for r in results) else 0


def print_summary(summary: list[dict[str, Any]]) -> None:
    """The table of rates and ratios, then the extender's latency and memory per node count and mode."""
    header = ("nodes", "mode", "median pods/s", "vs plain", "runs (pods/s)", "failed binds")
    print("\n{:>6} {:>17} {:>14} {:>9} {:>28} {:>13}".format(*header))
    for row in summary:
        runs = " ".join(f"{r:g}" for r in row["runs"])
        print(
            f"{row['nodes']:>6} {row['mode']:>17} {row['median_pods_per_s']:>14} {row['vs_plain']:>9.2f} "
            f"{runs:>28} {row['failed_binds']:>13}"
        )
    for row in summary:
        latency = [
            f"{verb} p50 {row[f'{verb}_p50_ms']} ms p99 {row[f'{verb}_p99_ms']} ms"
            for verb in VERBS
            if f"{verb}_p50_ms" in row
        ]
        if latency:
            rss = row.get("extender_rss_mib", 0.0)
            print(f"{row['nodes']:>6} {row['mode']:>17}: {', '.join(latency)}; extender RSS {rss} MiB")
    for row in summary:
        if "cpu_ms_per_pod" in row:
            spent = ", ".join(f"{name} {ms}" for name, ms in row["cpu_ms_per_pod"].items())
            print(f"{row['nodes']:>6} {row['mode']:>17}: CPU ms per pod (median): {spent}")
    for row in summary:
        if "scheduler_cycle" in row:
            spent = ", ".join(f"{name} {ms}" for name, ms in row["scheduler_cycle"].items())
            print(f"{row['nodes']:>6} {row['mode']:>17}: kube-scheduler's cycle per pod (median): {spent}")
    late = [f"{row['nodes']} nodes {row['mode']}: {row['late']}" for row in summary if row["late"]]
    if late:
        # Their watch dropped and a list stamped them: those runs' rates lean on the list's time.
        print("pods seen bound only by a relist after a dropped watch: " + "; ".join(late))


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median pods/s per node count and mode, and its ratio to the plain median."""
    rows = []
    for nodes in sorted({r["nodes"] for r in results}):
        medians = {}
        for mode in dict.fromkeys(r["mode"] for r in results if r["nodes"] == nodes):
            runs = [r for r in results if r["nodes"] == nodes and r["mode"] == mode]
            medians[mode] = statistics.median(r["pods_per_s"] for r in runs)
            failed = sum(r.get("failed_binds", 0) for r in runs) if mode.startswith("extender") else "-"
            row = {
                "nodes": nodes,
                "mode": mode,
                "median_pods_per_s": round(medians[mode], 1),
                "runs": [r["pods_per_s"] for r in runs],
                "failed_binds": failed,
                "late": sum(r["late"] for r in runs),
            }
            # The extender's latency per verb it was called with (median over the runs) and its
            # largest resident memory.
            for verb in VERBS:
                for name in ("p50", "p99"):
                    key = f"{verb}_{name}_ms"
                    values = [r[key] for r in runs if r.get(f"{verb}_calls")]
                    if values:
                        row[key] = round(statistics.median(values), 2)
            per_pod = [r["cpu_ms_per_pod"] for r in runs if "cpu_ms_per_pod" in r]
            if per_pod:
                names = sorted({name for spent in per_pod for name in spent}, key=lambda n: (n == "total", n))
                row["cpu_ms_per_pod"] = {
                    name: round(statistics.median(spent.get(name, 0.0) for spent in per_pod), 2) for name in names
                }
            cycles = [r["scheduler_cycle"] for r in runs if "scheduler_cycle" in r]
            if cycles:
                row["scheduler_cycle"] = {
                    name: round(statistics.median(c[name] for c in cycles), 3) for name in cycles[0]
                }
            if any("extender_rss_mib" in r for r in runs):
                row["extender_rss_mib"] = max(r.get("extender_rss_mib", 0.0) for r in runs)
            rows.append(row)
        for row in rows:
            if row["nodes"] == nodes:
                plain = medians.get("plain", 0.0)
                row["vs_plain"] = round(row["median_pods_per_s"] / plain, 3) if plain else 0.0
    return rows


if __name__ == "__main__":
    sys.exit(main())
