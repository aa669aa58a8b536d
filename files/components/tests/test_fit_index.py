"""filter and filter-tightest answer from indexes of the nodes where a request size fits
(fit_index.py), kept up to date as binds, pod events and node changes arrive. Whatever happened
before, their answer must be the rule's, judged node by node with ClusterModel.fit()."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from fakes import node_obj, pod_obj
from vgpu_components import fit_index
from vgpu_components.extender_verbs import Extender
from vgpu_components.scheduling import ClusterModel

NODES = [f"n{i}" for i in range(12)]
# More sizes than the indexes keep at once, so some are dropped and rebuilt on the way.
SIZES = list(range(10, 130, 6))


def rule(model: ClusterModel, names: list[str], units: int, cores: int, tightest: bool) -> list[str]:
    """The nodes passed, judged one by one: those where fit() places the pod, and of them, with
    `tightest`, those with the highest score; in the order given."""
    fits = {name: model.fit(name, units, cores) for name in names}
    passed = [name for name in names if fits[name].gpu is not None]
    if not tightest or len(passed) < 2:
        return passed
    best = max(fits[name].score for name in passed)
    return [name for name in passed if fits[name].score == best]


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    """Two or three GPUs of 12 GiB (122 units), some used, maybe one unhealthy; a node in four
    with compute shares."""
    gpus = [(f"GPU-{name}-{g}", 12288, rng.choice([0, 0, 30, 61, 100, 122])) for g in range(rng.choice([2, 3]))]
    cores = [(100, rng.choice([0, 40, 100])) for gpu in gpus] if rng.random() < 0.25 else None
    node = node_obj(name, gpus, cores=cores)
    if rng.random() < 0.2:
        annotation = json.loads(node["metadata"]["annotations"]["vgpu.io/gpus"])
        annotation["gpus"][0]["healthy"] = False
        node["metadata"]["annotations"]["vgpu.io/gpus"] = json.dumps(annotation)
    return node


class Changes:
    """What changes the model, at random: node annotations (a new one, none, an unreadable one),
    nodes gone, our binds (some failing), binds seen by the watch, pods gone, relists, expiry."""

    def __init__(self, rng: random.Random, model: ClusterModel) -> None:
        self.rng, self.model = rng, model
        self.nodes = {name: random_node(rng, name) for name in NODES}
        self.bound: dict[str, dict[str, Any]] = {}
        model.replace_all(list(self.nodes.values()), [])

    def random_step(self) -> None:
        steps = [self.node_changed, self.node_gone, self.our_bind, self.our_bind]
        steps += [self.bind_seen, self.bind_seen, self.pod_gone, self.relist]
        self.rng.choice(steps)(f"u{self.rng.randrange(30)}")

    def node_changed(self, _uid: str) -> None:
        name = self.rng.choice(NODES)
        self.nodes[name] = random_node(self.rng, name)
        self.model.set_node(self.nodes[name])

    def node_gone(self, _uid: str) -> None:
        name, chance = self.rng.choice(NODES), self.rng.random()
        if chance < 0.4:
            self.nodes.pop(name, None)
            self.model.remove_node(name)
        elif chance < 0.7:  # the annotation is gone: the device plugin stopped
            self.model.set_node(node_obj(name, None))
        else:
            self.model.set_node({"metadata": {"name": name, "annotations": {"vgpu.io/gpus": "not JSON"}}})

    def our_bind(self, uid: str) -> None:
        state = self.model.nodes.get(self.rng.choice(NODES))
        if state is not None:
            gpu = self.rng.choice(state.gpus)
            placement = self.model.reserve(uid, "default", uid, node=state.name, gpu=gpu, units=20)
            (self.model.release if self.rng.random() < 0.3 else self.model.bound)(placement)

    def bind_seen(self, uid: str) -> None:
        name = self.rng.choice(NODES)
        pod = pod_obj(uid, 100 * self.rng.randint(5, 60), uid=uid)
        pod["spec"]["nodeName"] = name
        pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": f"GPU-{name}-{self.rng.randrange(2)}"}
        self.bound[uid] = pod
        self.model.set_pod(pod)

    def pod_gone(self, uid: str) -> None:
        self.bound.pop(uid, None)
        self.model.remove_pod(uid)

    def relist(self, _uid: str) -> None:
        if self.rng.random() < 0.5:
            self.model.replace_all(list(self.nodes.values()), list(self.bound.values()))
        else:
            self.model.expire_reservations(now=10**9)


@pytest.mark.parametrize("order_by_index", [fit_index.ORDER_BY_INDEX, 1])
def test_filter_answers_as_the_rule_through_any_sequence_of_changes(
    order_by_index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways of putting the tightest nodes in kube-scheduler's order run (a search each for a
    few, a pass over the names for more)."""
    monkeypatch.setattr(fit_index, "ORDER_BY_INDEX", order_by_index)
    rng = random.Random(7)  # noqa: S311 - a reproducible sequence, not a secret
    model = ClusterModel("vgpu.io")
    extender = Extender(model)
    changes = Changes(rng, model)
    for step in range(2500):
        changes.random_step()
        names = rng.sample([*NODES, "not-a-node"], rng.randint(0, len(NODES) + 1))
        units = rng.choice(SIZES)
        cores = rng.choice([0, 0, 0, 40])
        tightest = rng.random() < 0.7
        args = {"Pod": pod_obj("p", units * 100, cores=cores or None), "Nodes": None, "NodeNames": names}
        answer = extender.filter(args, tightest=tightest)
        assert isinstance(answer, dict)
        expected = rule(model, names, units, cores, tightest)
        assert answer["NodeNames"] == expected, f"step {step}: {units} units, {cores} cores, tightest={tightest}"


def test_the_indexes_kept_are_the_sizes_asked_last() -> None:
    """Memory stays bounded however many request sizes pods ask: the least recently asked go."""
    model = ClusterModel("vgpu.io")
    model.replace_all([node_obj("n0", [("GPU-0", 12288, 0)])], [])
    for units in range(1, 2 * fit_index.MAX_SIZES + 1):
        assert model.admitted(["n0"], units) == ["n0"]
    assert model.admitted(["n0"], 123) == []  # more than the GPU's 122 units
    kept = list(model.fits._by_units)
    assert len(kept) == fit_index.MAX_SIZES
    assert kept[-1] == 123
    # Sizes 1 .. 2 * MAX_SIZES were asked, then 123: the oldest kept is MAX_SIZES + 2.
    assert kept[0] == fit_index.MAX_SIZES + 2
