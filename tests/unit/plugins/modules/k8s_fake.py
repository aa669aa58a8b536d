"""An in-memory stand-in for the collection's K8sApi adapter.

A fake, on purpose and only here: unit tests run without any API server. It mimics what the
modules rely on - server-side apply merging into the live object, merge patch with null removal,
resourceVersion and generation bumps on real changes only, dry runs that store nothing, label
selectors - and nothing more. The same modules run against a real kube-apiserver in tests/k8s.
"""

import copy

CLUSTER_SCOPED = {"Node", "ClusterRole", "ClusterRoleBinding", "Namespace", "PriorityClass", "RuntimeClass"}


class FakeK8sError(Exception):
    pass


def _merge(live, applied):
    """Apply-style merge: mappings merge key by key, everything else is replaced."""
    out = copy.deepcopy(live)
    for key, value in applied.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_patch(live, patch):
    """RFC 7386: null deletes a key, mappings merge, everything else is replaced."""
    out = copy.deepcopy(live)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_patch(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class FakeApi:
    def __init__(self, objects=()):
        self.store = {}
        self.calls = []
        self.version = 100
        self.logs = {}
        self.on_get = None  # hook: called with (kind, name, obj) so a test can move state forward
        for obj in objects:
            self._store(copy.deepcopy(obj), creating=True)

    @staticmethod
    def _key(kind, name, namespace):
        return kind, namespace if kind not in CLUSTER_SCOPED else None, name

    def _store(self, obj, creating=False):
        meta = obj.setdefault("metadata", {})
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        if creating:
            meta.setdefault("generation", 1)
            meta.setdefault("uid", f"uid-{self.version}")
        self.store[self._key(obj["kind"], meta["name"], meta.get("namespace"))] = obj

    def namespaced(self, api_version, kind):
        return kind not in CLUSTER_SCOPED

    def get(self, api_version, kind, name, namespace=None):
        self.calls.append(("get", kind, name))
        obj = self.store.get(self._key(kind, name, namespace))
        if self.on_get:
            self.on_get(kind, name, obj)
        return copy.deepcopy(obj)

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        self.calls.append(("list", kind, label_selector))
        wanted = dict(part.split("=", 1) for part in label_selector.split(",")) if label_selector else {}
        items = []
        for (k, ns, _name), obj in sorted(self.store.items(), key=lambda kv: str(kv[0])):
            if k != kind or (namespace and ns != namespace):
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(key) == value for key, value in wanted.items()):
                items.append(copy.deepcopy(obj))
        return items

    def _write(self, before, after, dry_run):
        if before is not None and after == before:
            return copy.deepcopy(before)  # a no-op write keeps its resourceVersion, as the server does
        if before is not None and after.get("spec") != before.get("spec"):
            after["metadata"]["generation"] = before["metadata"].get("generation", 1) + 1
        if dry_run:
            return copy.deepcopy(after)
        self._store(after, creating=before is None)
        return copy.deepcopy(after)

    def apply(self, body, field_manager, force_conflicts=True, dry_run=False):
        self.calls.append(("apply", body["kind"], body["metadata"]["name"], field_manager, dry_run))
        meta = body["metadata"]
        before = self.store.get(self._key(body["kind"], meta["name"], meta.get("namespace")))
        after = _merge(before or {}, body)
        return self._write(before, after, dry_run)

    def merge_patch(self, api_version, kind, name, patch, *, namespace=None, field_manager=None, dry_run=False):
        self.calls.append(("patch", kind, name, dry_run))
        before = self.store.get(self._key(kind, name, namespace))
        if before is None:
            raise FakeK8sError(f"patch {kind} {name} failed: it does not exist")
        return self._write(before, _merge_patch(before, patch), dry_run)

    def delete(self, api_version, kind, name, namespace=None, dry_run=False):
        self.calls.append(("delete", kind, name, dry_run))
        if dry_run:
            return self._key(kind, name, namespace) in self.store
        return self.store.pop(self._key(kind, name, namespace), None) is not None

    def pod_log(self, name, namespace, container=None):
        return self.logs.get(name, "")
