"""Placement and weight sync across nodes, on a simulated two-node Ray cluster (two raylets on this machine).

Colocated with `policy_num_nodes=2`, the bundles spread over both nodes, so engine 1 sits on another node than the
sender (policy rank 0): `auto` gives engine 0 shared memory and engine 1 the broadcast group, and every sync is
verified by checksum on both. Separate placement puts the engine on the node the policy does not fill.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("two_node_run.py")


@pytest.fixture(scope="module")
def runs(spread_tiny_model_dir, data_dir, tmp_path_factory):
    """Both runs' reports, from one child process that owns the simulated cluster."""
    out = tmp_path_factory.mktemp("two_nodes")
    # The child starts its own cluster, never the session's. `Cluster` records its address as the machine's latest
    # cluster (`<ray temp dir>/ray_current_cluster`), where any `ray.init()` without an address would join it: a
    # private Ray temp dir (short: Ray's socket paths must stay under 107 characters) keeps it from the other test
    # processes of a parallel run.
    ray_tmp = tempfile.mkdtemp(prefix="skyrl-2n-", dir="/tmp")
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_TMPDIR": ray_tmp}
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), spread_tiny_model_dir, str(data_dir), str(out)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {report["run"]: report for report in reports}


def test_colocated_run_spans_two_nodes_and_syncs_each_engine_by_its_own_transport(runs):
    run = runs["colocated"]
    assert len(run["nodes"]) == 2
    assert len(set(run["worker_nodes"])) == 2, "policy_num_nodes=2 must put the two ranks on two nodes"
    assert run["engine_nodes"] == run["worker_nodes"], "engine i shares rank i's bundle"
    assert run["sync_plan"] == "shm -> engines [0]; broadcast -> engines [1]"
    assert run["global_step"] == 2
    assert run["versions"] == {"1": 2.0, "2": 3.0}  # the initial sync, then one per step
    assert all(count > 0 for count in run["verified"].values()) and len(run["verified"]) == 2
    assert all(math.isfinite(loss) for loss in run["loss"].values())


def test_separate_run_puts_the_engine_on_the_other_node_and_broadcasts(runs):
    run = runs["separate"]
    assert len(set(run["worker_nodes"])) == 1, "one node asked for: both ranks packed on it"
    assert set(run["engine_nodes"]).isdisjoint(run["worker_nodes"])
    assert run["sync_plan"] == "broadcast -> engines [0]"
    assert run["global_step"] == 1 and all(count > 0 for count in run["verified"].values())


def test_a_one_node_role_that_fits_no_single_node_is_refused_at_once(runs):
    """STRICT_PACK: 4 CPUs asked on one node of two 2-CPU nodes is refused before any waiting, naming the way out."""
    error = runs["too_big_for_one_node"]["error"]
    assert error.startswith("placement of policy: 2 bundle(s)")
    assert "asked on one node and needs 4 there, the largest node has 2" in error


def test_ranks_take_the_bundles_grouped_by_node(runs):
    """Ray's SPREAD deals bundles round-robin over the nodes; ranks take them grouped by node, so ranks 0-1 (one
    tensor-parallel group, one colocated vLLM engine with tensor_parallel_size=2) share a node, and engine i still
    shares rank i's bundle."""
    run = runs["rank_nodes"]
    policy = run["policy"]
    assert len(set(run["bundle_nodes"])) == 2 and sorted(run["bundle_nodes"]) == sorted(policy)
    assert policy[0] == policy[1] and policy[2] == policy[3] and policy[0] != policy[2]
    assert run["engine"] == policy
