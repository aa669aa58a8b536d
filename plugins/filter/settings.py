# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The check of the vgpu.isolation settings (docs/variables.md): every problem, each in one line.

roles/vgpu runs it on the controller before any node is touched (playbooks/check.yml runs it before
facts are gathered). It checks what a user can get wrong in the inventory: names (a misspelt
setting or role variable is refused with the nearest known name, from the collection's schema,
plugins/lookup/settings_schema.py), role variables of the other Kubernetes flavour, types (short
messages instead of Ansible's argument-spec dump), version strings that YAML turned into numbers,
memory sizes, ranges and choices, the rules between settings, and quotas no GPU of the cluster can
give. ``settings_report`` turns the problems of every host into one report.

What each setting is, its type, rules and scope, comes from the contract (contract/contract.yml,
generated into module_utils/contract.py), and its rules are checked by module_utils/rules.py, the
checker the components' config uses too: the check refuses what the components would refuse.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

from ansible_collections.vgpu.isolation.plugins.module_utils import rules
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import OLD_NAMES, RETIRED, SETTINGS, VERSION
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib, read_mib, units_for

_BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0")
_MEMORY_SIZES = tuple(name for name, entry in SETTINGS.items() if "size" in entry)


def _whole_number(value):
    """An int, or a string of digits (what ``-e name=64`` on the command line gives); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def known_names(schema):
    """Every variable a role or playbook of the collection reads: the names of each role's argument
    spec options (every entry point, roles/vgpu's ``playbooks`` included), defaults and vars."""
    names: set = set()
    for role in schema["roles"].values():
        names.update(role["defaults"], role["vars"])
        for options in role["entry_points"].values():
            names.update(options)
    return names


def role_prefixes(schema):
    """The prefixes of the roles' variables (``kubeadm_``, ``vgpu_``...): a name that starts with
    one belongs to the collection, so an unknown one is a mistake."""
    return tuple(sorted(name + "_" for name in schema["roles"]))


# Old names (the contract's old_names, module_utils/contract.py OLD_NAMES): a setting renamed since
# the last release keeps working under its old name for one release. roles/vgpu's default of the new
# name reads the old one (defaults/main.yml, generated), the check names the new one in a deprecation,
# and refuses an inventory that sets both to different values: which one it means is unknown.
# Retired names are read no more; set, they get a deprecation too, so an upgrade does not stop on them.


def deprecations(given):
    """One line per old or retired name the inventory sets, saying what to set instead."""
    lines = []
    for name in sorted(set(given)):
        if name in OLD_NAMES:
            lines.append(
                "%s: deprecated, renamed %s: set %s instead; release %s still reads the old name, the next "
                'refuses it (docs/variables.md, "Old names")' % (name, OLD_NAMES[name], OLD_NAMES[name], VERSION)
            )
        elif name in RETIRED:
            lines.append("%s: deprecated, no longer read: %s; remove it" % (name, RETIRED[name]))
    return lines


def renamed_problems(settings, given):
    """An old name and its new one both set, to values that act differently: one problem naming both."""
    problems = []
    for old in sorted(set(given)):
        new = OLD_NAMES.get(old)
        if new is None or new not in given or old not in settings or new not in settings:
            continue
        (old_value, old_shown), (new_value, new_shown) = (
            _comparable(new, settings[old], SETTINGS[new]),
            _comparable(new, settings[new], SETTINGS[new]),
        )
        if old_value != new_value:
            problems.append(
                "%s and %s are one setting (%s is its old name) set to different values, %s and %s; remove %s"
                % (old, new, old, old_shown, new_shown, old)
            )
    return problems


def with_new_names(values):
    """A host's settings with each old name's value under its new name, where the new one is not set
    (what roles/vgpu's defaults do for one release)."""
    out = dict(values)
    for old, new in OLD_NAMES.items():
        if old in values and new not in values:
            out[new] = values[old]
    return out


# A name this close to a known one (difflib's ratio) is taken for a typo of it, whatever its prefix
# (vpgu_memory_unit_mib); others without a role prefix are the site's own variables.
_TYPO_CUTOFF = 0.85


def unknown_names(given, known, prefixes):
    """One problem per given name that looks like a variable of the collection but is none."""
    problems = []
    candidates = sorted(known)
    for name in sorted(set(given)):
        if name in known or name in OLD_NAMES or name in RETIRED or name.startswith(("_", "ansible_")):
            continue
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=_TYPO_CUTOFF)
        if not close and not name.startswith(prefixes):
            continue
        hint = "did you mean %s? " % close[0] if close else ""
        problems.append(
            "%s: not a variable of vgpu.isolation; %sthe settings are listed in docs/variables.md, each role's "
            "variables in its meta/argument_specs.yml" % (name, hint)
        )
    return problems


# Variables of one cluster role: set while the other flavour is chosen, they do nothing.
_FLAVOUR_OF_PREFIX = (("kubeadm_", "kubeadm"), ("k3s_", "k3s"))


# Settings only some flavours read: K3s's release pins K3s alone (kubeadm takes vgpu_kubernetes_version),
# and without a cluster (none) no Kubernetes release is read at all.
_READ_BY_FLAVOURS = {"vgpu_k3s_version": ("k3s",), "vgpu_kubernetes_version": ("k3s", "kubeadm")}


def flavour_problems(settings, given):
    """One problem per given k3s_* or kubeadm_* variable, or flavour's setting, the chosen flavour does not read."""
    flavour = settings.get("vgpu_kubernetes_flavour")
    problems = []
    for name in sorted(set(given)):
        readers = _READ_BY_FLAVOURS.get(name)
        if readers and flavour not in readers:
            problems.append(
                "%s: set, but vgpu_kubernetes_flavour is %r, which never reads it (only %s does); remove it, or set "
                "vgpu_kubernetes_flavour to the cluster's kind" % (name, flavour, " and ".join(readers))
            )
        for prefix, owner in _FLAVOUR_OF_PREFIX:
            if name.startswith(prefix) and flavour != owner:
                problems.append(
                    "%s: a variable of the %s role, but vgpu_kubernetes_flavour is %r, so nothing reads it; "
                    "remove it, or set vgpu_kubernetes_flavour: %s" % (name, owner, flavour, owner)
                )
    return problems


# A role default that is a checked setting under the role's own name ("{{ vgpu_driver_branch }}"):
# set in the inventory, the role acts on a value the check never saw, and the other roles and the
# components read the setting.
_ALIAS = re.compile(r"^\{\{\s*(vgpu_\w+)\s*\}\}$")


def shadow_problems(given, schema):
    """One problem per given role variable whose default is a checked setting: set it instead."""
    problems = []
    given = set(given)
    for role, entry in sorted(schema["roles"].items()):
        for name, value in sorted((entry.get("defaults") or {}).items()):
            match = _ALIAS.match(value.strip()) if isinstance(value, str) else None
            if not match or match.group(1) not in SETTINGS or name in SETTINGS or name not in given:
                continue
            problems.append(
                "%s: the %s role's own name for %s; set there, the role would act on a value the settings check never "
                "saw while the other roles and the components read %s; set %s instead"
                % (name, role, match.group(1), match.group(1), match.group(1))
            )
    return problems


def _not_bool(value):
    if isinstance(value, bool) or str(value).lower() in _BOOLEANS:
        return None
    return "is not a boolean; expected true or false"


def _not_int(value):
    return None if _whole_number(value) is not None else "is not a whole number"


def _not_str(value):
    if isinstance(value, float):
        # YAML turned an unquoted version into a number and lost its trailing zeros.
        return "is a number, not a string: YAML reads an unquoted version such as 1.30 as 1.3; quote it"
    if isinstance(value, (bool, list, dict)):
        return "is not a string"
    return None


def _not_list(value):
    return None if isinstance(value, list) else "is not a list; expected a YAML list"


def _not_dict(value):
    return None if isinstance(value, dict) else "is not a mapping"


# The argument-spec types roles/vgpu uses, each with what is wrong with a value (None: nothing).
_TYPE_CHECKS = {
    "bool": _not_bool,
    "int": _not_int,
    "str": _not_str,
    "path": _not_str,
    "list": _not_list,
    "dict": _not_dict,
}


def type_problems(settings):
    """Types of the settings (the contract's, which roles/vgpu's argument spec is generated from)."""
    problems = []
    for name, entry in sorted(SETTINGS.items()):
        if name not in settings:
            continue
        value = settings[name]
        check = _TYPE_CHECKS.get(entry["type"])
        wrong = check(value) if check else None
        if wrong:
            problems.append("%s: %r %s" % (name, value, wrong))
    return problems


def rule_problems(settings):
    """Each setting's rules (module_utils/rules.py): ranges, choices, memory sizes, versions' forms,
    the resource prefix, the one working value, libvgpu's switches."""
    problems = []
    for name, entry in SETTINGS.items():
        if name in settings and not type_problems({name: settings[name]}):
            problems += rules.problems(name, settings[name], entry)
    return problems


def version_problems(settings):
    """The driver's version and branch agree (each version's form is a rule of its own)."""
    branch, version = settings.get("vgpu_driver_branch"), settings.get("vgpu_driver_version")
    if branch is not None and isinstance(version, str) and version.split(".")[0] != str(branch):
        return [
            "vgpu_driver_version: %r is not in vgpu_driver_branch %r; set both to the same branch" % (version, branch)
        ]
    return []


def _mib(value, minimum=0):
    """A size in MiB, or None when it is none (rule_problems reports that)."""
    mib, _why = read_mib(value)
    return mib if mib is not None and mib >= minimum else None


def memory_problems(settings):
    """The rules between memory sizes: quotas in whole units, the sample app within its quota, stated
    GPUs that offer at least one unit (a GPU's remainder below a unit is left unused)."""
    problems: list = []
    unit = _mib(settings.get("vgpu_memory_unit_mib"), 1)
    reserved = _mib(settings.get("vgpu_reserved_memory_mib", 0)) or 0
    quota = _mib(settings.get("vgpu_sample_app_quota"), 1)
    use = _mib(settings.get("vgpu_sample_app_use"), 1)
    if unit and quota and quota % unit:
        problems.append(
            "vgpu_sample_app_quota: %d MiB is not a multiple of vgpu_memory_unit_mib (%d MiB); pods request whole "
            "units, so quotas must be multiples of the unit: %d or %d MiB"
            % (quota, unit, quota // unit * unit, (quota // unit + 1) * unit)
        )
    if quota and use and use > quota:
        problems.append(
            "vgpu_sample_app_use: %d MiB is more than vgpu_sample_app_quota (%d MiB); the sample app "
            "must fit its quota (the verification checks the over-quota case itself)" % (use, quota)
        )
    for index, total in stated_gpus(settings, problems):
        if unit and units_for(total, reserved, unit) == 0:
            problems.append(
                "vgpu_gpu_memory_mib: GPU %d's %d MiB less vgpu_reserved_memory_mib (%d MiB) leaves less than one "
                "unit of %d MiB; lower the reserve or the unit" % (index, total, reserved, unit)
            )
    return problems


def stated_gpus(settings, problems):
    """(index, MiB) of each GPU vgpu_gpu_memory_mib states; a size that is none goes to problems."""
    stated = settings.get("vgpu_gpu_memory_mib") or []
    gpus = []
    for index, size in enumerate(stated if isinstance(stated, list) else []):
        try:
            gpus.append((index, parse_mib(size, "vgpu_gpu_memory_mib[%d]" % index)))
        except ValueError as exc:
            problems.append(str(exc))
    return gpus


def quota_problems(quota, unit, reserved, gpus):
    """The sample pod's quota against the largest GPU of the cluster, before the pod waits for a GPU
    that cannot exist. ``gpus`` lists (where, MiB) per GPU: stated in the inventory or read from
    nvidia-smi; none known: nothing to say."""
    try:
        quota_mib = parse_mib(quota, "vgpu_sample_app_quota")
        unit_mib = parse_mib(unit, "vgpu_memory_unit_mib")
        reserved_mib = parse_mib(reserved, "vgpu_reserved_memory_mib", 0)
    except ValueError:
        return []  # the settings check names a size that is none
    sized = [(units_for(int(total), reserved_mib, unit_mib), where, int(total)) for where, total in gpus]
    if not sized:
        return []
    units, where, total = max(sized, key=lambda item: (item[0], item[2]))
    if units == 0:
        room = total - reserved_mib
        fix = (
            "lower vgpu_memory_unit_mib to %d MiB or less" % room
            if room > 0
            else "lower vgpu_reserved_memory_mib below %d MiB" % total
        )
        return [
            "vgpu_memory_unit_mib: %d MiB is more than any GPU of the cluster offers: the largest, %s with %d MiB "
            "less %d MiB reserved (vgpu_reserved_memory_mib), has room for no unit, so no pod could get GPU memory; "
            "%s" % (unit_mib, where, total, reserved_mib, fix)
        ]
    if -(-quota_mib // unit_mib) <= units:
        return []
    return [
        "vgpu_sample_app_quota: %d MiB is more than any GPU of the cluster offers: the largest, %s with %d MiB, "
        "offers %d units of %d MiB = %d MiB (less %d MiB reserved, the remainder unused); lower the quota to "
        "%d MiB or less" % (quota_mib, where, total, units, unit_mib, units * unit_mib, reserved_mib, units * unit_mib)
    ]


# Settings that must be equal on every host of k8s_control_plane and gpu_nodes, each with why (the
# contract's scope cluster): the components read one ConfigMap rendered on the first control-plane
# host, and a pod's request means the same on every node. The others are per node: each host acts on
# its own value (GPUs of different generations need different driver branches, a node's GPUs are its
# own, MPS suits nodes of many small pods, nodes of different releases need their own bundles).
CLUSTER_WIDE = {name: entry["why"] for name, entry in SETTINGS.items() if entry["scope"] == "cluster"}
PER_NODE = tuple(name for name, entry in SETTINGS.items() if entry["scope"] == "node")


def _comparable(name, value, option):
    """The value as it acts (256 and "256MiB" agree), and how to show it; the raw value when invalid
    (the per-host check reports that)."""
    if name in _MEMORY_SIZES:
        mib = _mib(value)
        return (mib, "%d MiB" % mib) if mib is not None else (repr(value), repr(value))
    kind = option.get("type", "str")
    if kind == "bool" and str(value).lower() in _BOOLEANS:
        flag = str(value).lower() in ("true", "yes", "on", "1")
        return flag, str(flag).lower()
    if kind == "int" and _whole_number(value) is not None:
        return _whole_number(value), str(_whole_number(value))
    return str(value), str(value)


def cluster_problems(values_by_host, spec, first_control_plane=None):
    """One problem per cluster-wide setting whose value differs between hosts, and the sample pod's
    quota (``first_control_plane``'s, as verify_cluster.yml runs it) against the GPU memory the
    inventory states for its hosts.

    ``values_by_host`` maps each host of the cluster to the settings its inventory sets (a setting
    it does not set has its default from ``spec``, roles/vgpu's argument spec options).
    """
    problems = []
    values_by_host = {host: with_new_names(values) for host, values in values_by_host.items()}
    for name, reason in CLUSTER_WIDE.items():
        option = spec.get(name, {})
        groups: dict = {}  # comparable value -> (shown, [hosts]) in host order
        for host, values in values_by_host.items():
            value = values[name] if name in values else option.get("default")
            key, shown = _comparable(name, value, option)
            groups.setdefault(key, (shown, []))[1].append(host)
        if len(groups) > 1:
            found = "; ".join("%s on %s" % (shown, ", ".join(hosts)) for shown, hosts in groups.values())
            problems.append(
                "%s differs between hosts (%s): it is cluster-wide (%s); set it once for all of them, "
                "e.g. in group_vars/all" % (name, found, reason)
            )
    if first_control_plane in values_by_host:
        setting = _with_defaults(values_by_host[first_control_plane], spec)
        gpus = []
        for host, values in values_by_host.items():
            gpus += [("%s's GPU %d" % (host, i), mib) for i, mib in stated_gpus(_with_defaults(values, spec), [])]
        problems += quota_problems(
            setting["vgpu_sample_app_quota"], setting["vgpu_memory_unit_mib"], setting["vgpu_reserved_memory_mib"], gpus
        )
    return problems


def _with_defaults(values, spec):
    return dict({name: option.get("default") for name, option in spec.items()}, **values)


# The first release with every DRA feature the dra path uses on by default (DRAConsumableCapacity
# and DRAPartitionableDevices beta in 1.36; resource.k8s.io/v1 is GA since 1.34).
DRA_MINIMUM = (1, 36)
_MINOR = re.compile(r"^v?(\d+)\.(\d+)\.")


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def tenant_pod_policy_problems(settings):
    """vgpu_tenant_pod_policy off only with a stated reason; exempt namespaces that are namespace names."""
    problems = []
    off = str(settings.get("vgpu_tenant_pod_policy", True)).lower() in ("false", "no", "off", "0")
    if off and not str(settings.get("vgpu_tenant_pod_policy_off_reason") or "").strip():
        problems.append(
            "vgpu_tenant_pod_policy: false without vgpu_tenant_pod_policy_off_reason; with the policy off a "
            "privileged, SYS_ADMIN or hostPath pod in any namespace reaches every GPU of its node past its quota. "
            "Keep it on and name the namespaces that need such pods in vgpu_tenant_pod_policy_exempt_namespaces, "
            "or state why it is off (the site's own admission control refuses those pods, say)"
        )
    exempt = settings.get("vgpu_tenant_pod_policy_exempt_namespaces")
    for name in exempt if isinstance(exempt, list) else []:
        if not isinstance(name, str) or not _NAMESPACE.match(name):
            problems.append(
                "vgpu_tenant_pod_policy_exempt_namespaces: %r is no namespace name; expected a DNS label "
                "(lower-case letters, digits and '-', at most 63) such as 'kube-system'" % (name,)
            )
    return problems


def _dra_problem(source, version):
    """The problem of running vgpu_scheduling dra on ``version`` ("v1.35.2", "1.35.2", "v1.35.2+k3s1"),
    None when it is recent enough or not a version (another check says so)."""
    match = _MINOR.match(str(version or ""))
    if match is None or (int(match.group(1)), int(match.group(2))) >= DRA_MINIMUM:
        return None
    return (
        "vgpu_scheduling: 'dra' needs Kubernetes %d.%d or later (GPU memory as a DRA consumable capacity, "
        "beta and on by default from %d.%d); %s is %r" % (DRA_MINIMUM + DRA_MINIMUM + (source, version))
    )


def scheduling_problems(settings):
    if settings.get("vgpu_scheduling") != "dra":
        return []
    flavour = settings.get("vgpu_kubernetes_flavour")
    name = {"k3s": "vgpu_k3s_version", "kubeadm": "vgpu_kubernetes_version"}.get(flavour)
    problem = _dra_problem(name, settings.get(name)) if name else None
    return [problem] if problem else []


def server_version_problems(server_version, scheduling, where="the API server"):
    """The version a running cluster's API server reports (``kubectl version``'s serverVersion
    gitVersion) against vgpu_scheduling: an existing cluster's own version decides, not the settings."""
    if scheduling != "dra":
        return []
    problem = _dra_problem(where, server_version)
    if problem is None:
        return []
    return [problem + "; upgrade the cluster to 1.36 or later first, or keep vgpu_scheduling: extender"]


def settings_problems(settings, schema=None, given=None):
    """Every problem of the settings, one message each (empty when valid).

    ``settings`` maps each setting to its value, and each old name the inventory sets to its own
    (a new name not set has taken the old one's value: roles/vgpu's defaults read it). ``schema`` is
    the collection's variables (lookup vgpu.isolation.settings_schema): every role's variables are
    the names known. ``given`` lists the names the inventory and the command line set; one that
    looks like a variable of the collection but is none is refused with the nearest known name, an
    old name set beside its new one to another value is refused naming both, and a k3s_* or kubeadm_*
    variable the chosen flavour does not read is refused too.
    """
    problems = []
    if schema:
        problems += unknown_names(given or [], known_names(schema), role_prefixes(schema))
        problems += shadow_problems(given or [], schema)
    problems += renamed_problems(settings, given or [])
    problems += type_problems(settings)
    problems += rule_problems(settings)
    problems += flavour_problems(settings, given or [])
    problems += version_problems(settings)
    problems += memory_problems(settings)
    problems += scheduling_problems(settings)
    problems += tenant_pod_policy_problems(settings)
    return problems


def settings_report(problems_by_host, cluster=()):
    """One report for every host: each problem once, with the hosts it was found on (all of them
    when a group_vars/all setting is wrong), then the cluster-wide ones."""
    hosts_of: dict = {}
    for host, problems in problems_by_host.items():
        for problem in problems:
            hosts_of.setdefault(problem, []).append(host)
    lines = []
    for problem, hosts in hosts_of.items():
        where = "every host" if len(hosts) == len(problems_by_host) > 1 else ", ".join(hosts)
        lines.append("%s [%s]" % (problem, where))
    return lines + list(cluster)


class FilterModule(object):
    """The settings check of vgpu.isolation."""

    def filters(self):
        return {
            "settings_problems": settings_problems,
            "cluster_problems": cluster_problems,
            "settings_report": settings_report,
            "quota_problems": quota_problems,
            "settings_deprecations": deprecations,
            "server_version_problems": server_version_problems,
        }
