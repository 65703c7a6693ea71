"""A local S3 endpoint for the tests: moto's server mode, on loopback.

    python s3_server.py BUCKET PORT_FILE [SPREAD]

Serves on a free port of 127.0.0.1, creates BUCKET and the buckets
BUCKET-0 … BUCKET-(SPREAD-1), then writes the port to PORT_FILE (so a
caller knows it is ready) and serves until it is killed. moto lists a
prefix by scanning its whole bucket, so tests that make many tables spread
them over the SPREAD buckets rather than fill one.

One request at a time: S3 makes a conditional put (`If-None-Match: *`)
atomic, so that of two writers putting the same object one gets 412, and a
Delta commit rests on it. moto checks for the object, then writes it; with
requests served concurrently, two puts could both pass the check. Serving
them one after another gives the tests S3's guarantee.
"""

import os
import sys
import threading

import boto3
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


def one_at_a_time(app):
    lock = threading.Lock()

    def serve(environ, start_response):
        with lock:
            return list(app(environ, start_response))

    return serve


def main():
    bucket, port_file = sys.argv[1], sys.argv[2]
    spread = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(
        "127.0.0.1", 0, one_at_a_time(app), threaded=True, request_handler=MotoRequestHandler
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{server.port}",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    for name in [bucket] + [f"{bucket}-{n}" for n in range(spread)]:
        client.create_bucket(Bucket=name)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.port))
    os.replace(port_file + ".tmp", port_file)
    threading.Event().wait()


if __name__ == "__main__":
    main()
