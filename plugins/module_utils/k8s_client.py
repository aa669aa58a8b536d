# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small adapter over the `kubernetes` Python client for the collection's modules.

The modules only need get, list, server-side apply, merge patch, delete and pod logs, all on
plain dicts. Keeping that surface small lets the unit tests swap in an in-memory API.
"""

import json
import traceback

try:
    from kubernetes import client as k8s_rest
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()


class K8sError(Exception):
    """An API call failed; the message says which call, on what, and the server's reason."""


def _reason(exc):
    """The server's own message from an API error, falling back to the exception text."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    status = getattr(exc, "status", None)
    if body:
        return "HTTP %s: %s" % (status, body)
    return str(exc)


class K8sApi:
    """Plain-dict access to any resource kind through the discovery-based dynamic client."""

    def __init__(self, kubeconfig=None, context=None):
        if not HAS_KUBERNETES:
            raise K8sError("the kubernetes Python library is not installed")
        try:
            api_client = k8s_config.new_client_from_config(config_file=kubeconfig, context=context)
        except Exception as exc:  # the loader raises several unrelated types for a bad kubeconfig
            raise K8sError("cannot load kubeconfig %s: %s" % (kubeconfig or "(default)", exc)) from exc
        self._core = k8s_rest.CoreV1Api(api_client)
        self._dyn = DynamicClient(api_client)

    def _resource(self, api_version, kind):
        try:
            return self._dyn.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as exc:
            raise K8sError("the API server does not serve %s %s" % (api_version, kind)) from exc
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("API discovery failed: %s" % _reason(exc)) from exc
        except Exception as exc:  # connection refused, TLS errors: urllib3 raises its own types
            raise K8sError("cannot reach the API server: %s" % exc) from exc

    def namespaced(self, api_version, kind):
        """Whether objects of this kind live in a namespace."""
        return bool(self._resource(api_version, kind).namespaced)

    def get(self, api_version, kind, name, namespace=None):
        """The object as a dict, or None when it does not exist."""
        resource = self._resource(api_version, kind)
        try:
            return resource.get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("get %s %s failed: %s" % (kind, name, _reason(exc))) from exc

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        """The items of a list call as dicts (kind and apiVersion filled in)."""
        resource = self._resource(api_version, kind)
        try:
            result = resource.get(namespace=namespace, label_selector=label_selector, field_selector=field_selector)
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("list %s failed: %s" % (kind, _reason(exc))) from exc
        items = []
        for item in result.to_dict().get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            items.append(item)
        return items

    def apply(self, body, field_manager, force_conflicts=True, dry_run=False):
        """Server-side apply of one object; returns the object the server holds (or would hold)."""
        resource = self._resource(body["apiVersion"], body["kind"])
        meta = body["metadata"]
        kwargs = {"field_manager": field_manager, "force_conflicts": force_conflicts}
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            try:
                return resource.server_side_apply(
                    body=body, name=meta["name"], namespace=meta.get("namespace"), **kwargs
                ).to_dict()
            except ApiException as exc:
                # Clients before 24.2 (Debian 12 and Ubuntu 22.04 package 22.6) cannot encode a dict
                # as application/apply-patch+yaml and refuse before sending (status 0); they send a
                # string as it is, and JSON is YAML.
                if exc.status != 0:
                    raise
                return resource.server_side_apply(
                    body=json.dumps(body), name=meta["name"], namespace=meta.get("namespace"), **kwargs
                ).to_dict()
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("apply %s %s failed: %s" % (body["kind"], meta["name"], _reason(exc))) from exc

    def create(self, body):
        """POST one object (for kinds that are only ever created, such as access reviews)."""
        resource = self._resource(body["apiVersion"], body["kind"])
        namespace = (body.get("metadata") or {}).get("namespace")
        try:
            return resource.create(body=body, namespace=namespace).to_dict()
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("create %s failed: %s" % (body["kind"], _reason(exc))) from exc

    def merge_patch(self, api_version, kind, name, patch, *, namespace=None, field_manager=None, dry_run=False):
        """JSON merge patch (null removes a key) of an existing object; returns the patched object."""
        resource = self._resource(api_version, kind)
        kwargs = {"content_type": "application/merge-patch+json"}
        if field_manager:
            kwargs["field_manager"] = field_manager
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            return resource.patch(body=patch, name=name, namespace=namespace, **kwargs).to_dict()
        except NotFoundError as exc:
            raise K8sError("patch %s %s failed: it does not exist" % (kind, name)) from exc
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("patch %s %s failed: %s" % (kind, name, _reason(exc))) from exc

    def delete(self, api_version, kind, name, namespace=None, dry_run=False):
        """Delete one object in the background; returns False when it was already gone."""
        resource = self._resource(api_version, kind)
        kwargs = {"propagation_policy": "Background"}
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            resource.delete(name=name, namespace=namespace, **kwargs)
        except NotFoundError:
            return False
        except (ApiException, DynamicApiError) as exc:
            raise K8sError("delete %s %s failed: %s" % (kind, name, _reason(exc))) from exc
        return True

    def pod_log(self, name, namespace, container=None):
        """The log of a pod's container as text."""
        kwargs = {"container": container} if container else {}
        try:
            return self._core.read_namespaced_pod_log(name=name, namespace=namespace, **kwargs) or ""
        except ApiException as exc:
            raise K8sError("log of pod %s/%s failed: %s" % (namespace, name, _reason(exc))) from exc
