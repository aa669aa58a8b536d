# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The images an image archive holds, named as containerd names them after `ctr images import`.

An archive of `docker save` or `ctr images export` lists its images in manifest.json (RepoTags).
Docker writes them short ("pause:3.10", "library/busybox"); containerd stores the normalised
reference ("docker.io/library/pause:3.10"). Comparing the archive's names with `ctr images list`
therefore needs the same normalisation, or an image that is present reads as missing and every
run imports it again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.errors import AnsibleFilterError

DEFAULT_DOMAIN = "docker.io"


def normalized_image_reference(name):
    """containerd's name for an image reference: domain and, on Docker Hub, "library/" added."""
    name = str(name).strip()
    first, sep, rest = name.partition("/")
    # A first component is a registry when it looks like a host: a dot, a port or localhost.
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        domain, path = DEFAULT_DOMAIN, name
    else:
        domain, path = first, rest
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = "library/" + path
    last = path.rpartition("/")[2]
    if ":" not in last and "@" not in last:
        path += ":latest"
    return domain + "/" + path


def archive_images(manifest_text, archive="the image archive"):
    """The normalised image references of an archive's manifest.json text."""
    try:
        manifest = json.loads(manifest_text)
    except ValueError as err:
        raise AnsibleFilterError(
            "%s: its manifest.json is not JSON (%s); expected an archive written by "
            "`docker save` or `ctr images export`" % (archive, err)
        ) from None
    if not isinstance(manifest, list):
        raise AnsibleFilterError(
            "%s: its manifest.json is not a list of images; expected an archive "
            "written by `docker save` or `ctr images export`" % archive
        )
    names = []
    for entry in manifest:
        for tag in (entry.get("RepoTags") or []) if isinstance(entry, dict) else []:
            reference = normalized_image_reference(tag)
            if reference not in names:
                names.append(reference)
    if not names:
        raise AnsibleFilterError(
            "%s names no image (no RepoTags in its manifest.json): containerd would "
            "import it without a name kubelet could find; tag the images before "
            "saving them" % archive
        )
    return names


class FilterModule(object):
    """Image archives."""

    def filters(self):
        return {"archive_images": archive_images}
