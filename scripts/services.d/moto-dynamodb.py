"""moto's DynamoDB as an HTTP server for the tests, one request at a time.

Single-threaded on purpose: moto's backends take no locks, so with threads two conditional
writes can interleave inside the emulator and both succeed. Served one by one, every request is
atomic, as DynamoDB's conditional writes and transactions are. Only DynamoDB is served (moto's
per-request service dispatch costs a third of each request), and requests are not logged.
Usage: moto-dynamodb.py PORT
"""
import logging
import sys

from moto.moto_server.werkzeug_app import create_backend_app
from werkzeug.serving import run_simple

if __name__ == "__main__":
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    run_simple(
        "127.0.0.1",
        int(sys.argv[1]),
        create_backend_app("dynamodb"),
        threaded=False,
        use_reloader=False,
    )
