"""The few curl options the control-plane scripts use, for a host without curl (run.sh installs it as
`curl` only where curl is missing): an HTTP(S) GET that prints the body.

    httpget.py [-s] [-f] [-k] [--max-time S] [--cacert F] [--cert F] [--key F] URL

-f: exit 22 on an HTTP error status, as curl does; 7 when the server cannot be reached.
"""

from __future__ import annotations

import argparse
import http.client
import ssl
import sys
import urllib.parse


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="curl", add_help=False)
    parser.add_argument("-s", "--silent", action="store_true")
    parser.add_argument("-f", "--fail", action="store_true")
    parser.add_argument("-k", "--insecure", action="store_true")
    parser.add_argument("--max-time", type=float, default=30.0)
    parser.add_argument("--cacert")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("url")
    args = parser.parse_args(argv)
    url = urllib.parse.urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        print(f"curl: (1) only http and https URLs: {args.url}", file=sys.stderr)
        return 1
    context = ssl.create_default_context(cafile=args.cacert)
    if args.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if args.cert:
        context.load_cert_chain(args.cert, args.key)
    connection = (
        http.client.HTTPSConnection(url.hostname, url.port, timeout=args.max_time, context=context)
        if url.scheme == "https"
        else http.client.HTTPConnection(url.hostname, url.port, timeout=args.max_time)
    )
    try:
        connection.request("GET", url.path + (f"?{url.query}" if url.query else "") or "/")
        reply = connection.getresponse()
        body = reply.read()
    except OSError as exc:
        if not args.silent:
            print(f"curl: (7) {exc}", file=sys.stderr)
        return 7
    finally:
        connection.close()
    if args.fail and reply.status >= 400:
        if not args.silent:
            print(f"curl: (22) The requested URL returned error: {reply.status}", file=sys.stderr)
        return 22
    sys.stdout.buffer.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
