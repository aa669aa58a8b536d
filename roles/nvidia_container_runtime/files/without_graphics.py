"""The NVIDIA driver's graphics files out of a new container's OCI specification, then runc (issue 38).

Run by runc-without-graphics for `create` and `run`:  python3 -IS without_graphics.py RUNTIME ARGS...
It edits the bundle's config.json in place and then becomes RUNTIME with ARGS.

Graphics are what the NVIDIA container toolkit's `graphics` and `display` capabilities hand a
container (libnvidia-container's lists; the toolkit's graphics discoverer, 1.20): the OpenGL, EGL
and Vulkan user-space driver, its configuration files for the loaders (glvnd, the Vulkan ICD and
layers, EGL's external platforms), the X.Org driver modules, and the GPU's DRM nodes with their
cgroup rules. Compute, video, utility, NGX and everything else stay. The toolkit's hooks stay too: a
symbolic link it makes to a library taken out points nowhere.

A specification that cannot be read is handed on as it is (runc reports it); one that cannot be
written back stops the container, with the reason.
"""

import json
import os
import re
import sys

# Libraries by their name before ".so"; a version or nothing follows.
LIBRARIES = re.compile(
    r"^(libGLX_nvidia|libEGL_nvidia|libGLESv1_CM_nvidia|libGLESv2_nvidia|libnvoptix|libglxserver_nvidia|nvidia_drv"
    r"|libnvidia-(glcore|eglcore|glsi|glvkspirv|tls|rtcore|cbl|fbc|ifr|vulkan-producer|present"
    r"|egl-gbm|egl-wayland2?|egl-xcb|egl-xlib))\.so(\.[0-9.]+)?$"
)
# The loaders' configuration files, by their path's end.
CONFIGS = re.compile(
    r"/(vulkan/(icd\.d|implicit_layer\.d)/nvidia_(icd|layers)(\.[a-z0-9_]+)?\.json"
    r"|glvnd/egl_vendor\.d/[0-9]+_nvidia\.json|egl/egl_external_platform\.d/[0-9]+_nvidia_[a-z0-9]+\.json)$"
)
DRM = "/dev/dri/"


def is_graphics(path):
    """Whether a path a container gets is one of the driver's graphics files."""
    return bool(LIBRARIES.match(os.path.basename(path)) or CONFIGS.search(path) or path.startswith(DRM))


def without_graphics(spec):
    """``spec`` without the graphics mounts, DRM device nodes and the cgroup rules that only those
    nodes needed; the paths taken out, sorted (none: ``spec`` is unchanged). Only an NVIDIA GPU
    container (one given /dev/nvidiactl) is changed: another device plugin's DRM nodes stay."""
    linux = spec.get("linux") or {}
    if not any(node.get("path") == "/dev/nvidiactl" for node in linux.get("devices") or []):
        return []
    removed = []
    mounts = []
    for mount in spec.get("mounts") or []:
        if is_graphics(mount.get("destination", "")):
            removed.append(mount["destination"])
        else:
            mounts.append(mount)
    kept, dropped = [], []
    for node in linux.get("devices") or []:
        (dropped if is_graphics(node.get("path", "")) else kept).append(node)
    if not removed and not dropped:
        return []
    if "mounts" in spec:
        spec["mounts"] = mounts
    if dropped:
        linux["devices"] = kept
        still = {(n.get("type"), n.get("major"), n.get("minor")) for n in kept}
        gone = {(n.get("type"), n.get("major"), n.get("minor")) for n in dropped} - still
        resources = linux.get("resources") or {}
        if resources.get("devices"):
            resources["devices"] = [
                rule
                for rule in resources["devices"]
                if not (rule.get("allow") and (rule.get("type"), rule.get("major"), rule.get("minor")) in gone)
            ]
        removed.extend(n["path"] for n in dropped)
    return sorted(removed)


def bundle_of(args):
    """The bundle folder of a runc `create` or `run` (--bundle, -b; default the working folder)."""
    for i, arg in enumerate(args):
        for flag in ("--bundle", "-b"):
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg[len(flag) + 1 :]
    return "."


def rewrite(path):
    """Takes the graphics out of the specification at ``path``; what was taken out."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError):
        return []  # runc reads it next and says what is wrong
    if not isinstance(spec, dict):
        return []
    removed = without_graphics(spec)
    if removed:
        new = path + ".vgpu-tmp"
        with open(new, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        os.chmod(new, os.stat(path).st_mode & 0o7777)
        os.replace(new, path)
    return removed


def main(argv):
    runtime, args = argv[1], argv[2:]
    path = os.path.join(bundle_of(args), "config.json")
    try:
        rewrite(path)
    except OSError as exc:
        sys.stderr.write(f"runc-without-graphics: cannot take the graphics files out of {path}: {exc}\n")
        return 1
    os.execv(runtime, [runtime, *args])  # noqa: S606 - runc with the arguments it was given, no shell
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
