"""Add IPv4 addresses to a network interface through rtnetlink, as `ip address add` does, on hosts
without iproute2 (the GPU host): tests/gpu/kubelet/run.sh gives the loopback interface the node's
address and the address of the `kubernetes` Service.

    python3 netaddr.py IFACE ADDRESS/PREFIX...

An address the interface already has is left as it is.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
import sys

RTM_NEWADDR = 20
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
IFA_ADDRESS, IFA_LOCAL = 1, 2
RT_SCOPE_UNIVERSE = 0


def attribute(kind: int, data: bytes) -> bytes:
    """One rtnetlink attribute (struct rtattr), padded to 4 bytes."""
    length = 4 + len(data)
    return struct.pack("=HH", length, kind) + data + b"\0" * (-length % 4)


def add_address(interface: str, cidr: str) -> bool:
    """Add cidr to interface; False when the interface already had it."""
    address = ipaddress.IPv4Interface(cidr)
    # struct ifaddrmsg: family, prefix length, flags, scope, interface index.
    body = struct.pack(
        "=BBBBI", socket.AF_INET, address.network.prefixlen, 0, RT_SCOPE_UNIVERSE, socket.if_nametoindex(interface)
    )
    body += attribute(IFA_LOCAL, address.ip.packed) + attribute(IFA_ADDRESS, address.ip.packed)
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    header = struct.pack("=IHHII", 16 + len(body), RTM_NEWADDR, flags, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.sendto(header + body, (0, 0))
        reply = sock.recv(65536)
    kind = struct.unpack_from("=H", reply, 4)[0]
    code = -struct.unpack_from("=i", reply, 16)[0] if kind == NLMSG_ERROR else 0
    if code == errno.EEXIST:
        return False
    if code:
        raise OSError(code, f"adding {cidr} to {interface}: {os.strerror(code)}")
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    interface, *addresses = argv
    for cidr in addresses:
        added = add_address(interface, cidr)
        print(f"{cidr} on {interface}: {'added' if added else 'already there'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
