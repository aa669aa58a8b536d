# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers for Kubernetes objects: loading manifests, comparing, ordering, rollout state.

Nothing here talks to an API server, so all of it is unit-tested without one.
"""

import copy
import traceback

try:
    import yaml

    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError:
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()

# Apply in dependency order (accounts and RBAC before workloads that use them); delete in reverse.
_KIND_ORDER = [
    "Namespace",
    "PriorityClass",
    "RuntimeClass",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "DaemonSet",
    "Deployment",
    "Pod",
]

# Fields the server owns: they change without any change of intent, so they never count as a change.
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink")


class ManifestError(ValueError):
    """A manifest that cannot be applied; the message names the document and what is wrong."""


def load_documents(text, origin="definition"):
    """Parse multi-document YAML into a list of object dicts, skipping empty documents."""
    if not HAS_YAML:
        raise ManifestError("reading YAML manifests needs PyYAML on the host that runs the module")
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError("%s is not valid YAML: %s" % (origin, exc)) from exc
    return flatten([d for d in docs if d is not None], origin)


def flatten(items, origin="definition"):
    """Expand `kind: List` documents and check that every item names apiVersion, kind and name."""
    objects = []
    for index, item in enumerate(items):
        where = "%s document %d" % (origin, index + 1)
        if not isinstance(item, dict):
            raise ManifestError("%s is a %s, expected a mapping (a Kubernetes object)" % (where, type(item).__name__))
        if item.get("kind") == "List" or (str(item.get("kind", "")).endswith("List") and "items" in item):
            objects.extend(flatten(item.get("items") or [], where))
            continue
        for key in ("apiVersion", "kind"):
            if not item.get(key):
                raise ManifestError("%s has no %s" % (where, key))
        if not (item.get("metadata") or {}).get("name"):
            raise ManifestError("%s (%s) has no metadata.name" % (where, item["kind"]))
        objects.append(item)
    return objects


def ref(obj):
    """A short human name for an object: Kind/namespace/name or Kind/name."""
    meta = obj.get("metadata") or {}
    if meta.get("namespace"):
        return "%s/%s/%s" % (obj.get("kind"), meta["namespace"], meta.get("name"))
    return "%s/%s" % (obj.get("kind"), meta.get("name"))


def order_for_apply(objects):
    """Objects sorted so that dependencies come first; unknown kinds go last, stable otherwise."""

    def rank(obj):
        kind = obj.get("kind")
        return _KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)

    return sorted(objects, key=rank)


def order_for_delete(objects):
    """The reverse of the apply order: workloads go before the accounts they run as."""
    return list(reversed(order_for_apply(objects)))


def normalize(obj):
    """A copy without server-owned bookkeeping and status, so two reads can be compared for intent."""
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in _VOLATILE_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if "annotations" in meta and not annotations:
        meta.pop("annotations")
    return out


def differs(before, after):
    """True when the object's intent (not bookkeeping) changed."""
    return normalize(before) != normalize(after)


def rollout_state(obj):
    """(done, message) for a workload object as read from the API; other kinds are done at once."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    generation = meta.get("generation") or 0
    observed = status.get("observedGeneration") or 0
    if kind not in ("DaemonSet", "Deployment"):
        return True, "%s needs no rollout" % ref(obj)
    if observed < generation:
        return False, "%s: controller has not seen generation %d yet (observed %d)" % (ref(obj), generation, observed)
    if kind == "DaemonSet":
        desired = status.get("desiredNumberScheduled") or 0
        updated = status.get("updatedNumberScheduled") or 0
        available = status.get("numberAvailable") or 0
        if updated < desired or available < desired:
            return False, "%s: %d of %d pods updated, %d available" % (ref(obj), updated, desired, available)
        return True, "%s: %d of %d pods available" % (ref(obj), available, desired)
    wanted = (obj.get("spec") or {}).get("replicas", 1)
    updated = status.get("updatedReplicas") or 0
    available = status.get("availableReplicas") or 0
    if updated < wanted or available < wanted:
        return False, "%s: %d of %d replicas updated, %d available" % (ref(obj), updated, wanted, available)
    return True, "%s: %d of %d replicas available" % (ref(obj), available, wanted)
