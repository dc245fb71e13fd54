"""The ``python`` of the documentation's examples: hands the command to the docs fork server
(tests/support/docs_shim.py).

Runs under ``python -S`` (standard library only, fast to start). Sends its arguments, working folder and
environment with its standard streams over the Unix socket ``$DOCS_TEST_SERVER`` and exits with the command's
status. ``python -c ...`` and other interpreter options go to the real interpreter.
"""

import json
import os
import socket
import sys


def main(argv: list[str]) -> int:
    if argv[:1] != ["-m"] and (not argv or argv[0].startswith("-")):
        os.execv(sys.executable, [sys.executable, *argv])
    payload = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(os.environ["DOCS_TEST_SERVER"])
        socket.send_fds(conn, [len(payload).to_bytes(8, "big") + payload], [0, 1, 2])
        status = b""
        while len(status) < 4:
            chunk = conn.recv(4 - len(status))
            if not chunk:
                print("docs-test: the command's process ended without a status", file=sys.stderr)
                return 1
            status += chunk
    return int.from_bytes(status, "big", signed=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
