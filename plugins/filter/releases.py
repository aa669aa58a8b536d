# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which interposer releases roles/vgpu_interposer removes after switching /opt/vgpu to a new one.

The rule: keep the release in use, the newest others up to ``keep`` in all, and every release a
running container still has mounted. A container bind-mounted the folder /opt/vgpu pointed at when
it started (a bind mount resolves the symlink at mount time), so it keeps its copy after the
symlink moves; removing that folder would empty it under the container.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def releases_to_prune(releases, current, in_use=(), keep=2):
    """Paths to remove, oldest first.

    ``releases``: the release folders as ansible.builtin.find returns them (path, mtime, dev, inode);
    ``current``: the folder /opt/vgpu points at; ``in_use``: "dev:inode" of the folders running
    containers have mounted (stat -L of /proc/<pid>/root/opt/vgpu); ``keep``: releases kept in all.
    """
    mounted = set(in_use)
    others = sorted((r for r in releases if r["path"] != current), key=lambda r: r["mtime"], reverse=True)
    old = others[max(int(keep), 1) - 1 :]
    return sorted(
        (r["path"] for r in old if "%s:%s" % (r["dev"], r["inode"]) not in mounted),
        key=lambda path: next(r["mtime"] for r in old if r["path"] == path),
    )


class FilterModule(object):
    """The interposer's release rule."""

    def filters(self):
        return {"releases_to_prune": releases_to_prune}
